-- Activity queues: a run handed over because its ready steps belong to a queue that the engine
-- holding it does not serve names that queue here until an engine serving it claims the run.
ALTER TABLE wf_instances ADD COLUMN wants_queue VARCHAR;
