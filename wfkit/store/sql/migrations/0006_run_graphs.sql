-- A run's own graph: engine.append grows a run in flight, and the grown graph is stored as a
-- definition row under the run's (workflow_id, version) with its own content hash, which the
-- run pins in wf_instances.hash. Such a row names the run that grew it first and the hash of the
-- registered graph it grew from; both are NULL for a registered definition.
ALTER TABLE wf_definitions ADD COLUMN run_id VARCHAR;
ALTER TABLE wf_definitions ADD COLUMN grown_from VARCHAR;
