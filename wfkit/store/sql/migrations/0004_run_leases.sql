-- Run leases: where many engine processes share a database (PostgreSQL), a process owns the runs
-- it advances until its lease runs out; a process that dies loses them to the others.
ALTER TABLE wf_instances ADD COLUMN owner VARCHAR;
ALTER TABLE wf_instances ADD COLUMN lease_until TIMESTAMP;
