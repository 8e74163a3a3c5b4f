-- An ended run that gained events (run.restarted, once per restart_as_new) kept the event number
-- of its summary row, so its next event took a number again. The row's seq is the last number
-- of its events from now on (the writer keeps it so); here the rows written before catch up.
-- Events already written twice under one number keep it.
UPDATE wf_instances
SET seq = (SELECT max(e.seq) FROM wf_events AS e WHERE e.run_id = wf_instances.run_id)
WHERE status IN ('completed', 'failed', 'cancelled')
  AND seq < (SELECT max(e.seq) FROM wf_events AS e WHERE e.run_id = wf_instances.run_id);
