-- Activity queues: the engine that handed a run over for a queue (wants_queue). An engine that
-- gave the run back earlier for lack of an activity waits out its back-off before claiming it
-- again, unless another engine has since handed it over for a queue it serves: the run moved on.
ALTER TABLE wf_instances ADD COLUMN handed_by VARCHAR;
