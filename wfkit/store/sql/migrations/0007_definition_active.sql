-- Deactivating a workflow version: a version whose rows say active = FALSE refuses new runs
-- (engine.deactivate), while its runs in flight finish. Every row of an (id, version) carries
-- the same value; NULL (a row written before this column) counts as active.
ALTER TABLE wf_definitions ADD COLUMN active BOOLEAN DEFAULT TRUE;
