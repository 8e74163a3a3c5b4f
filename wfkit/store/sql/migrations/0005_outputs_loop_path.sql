-- Nested for_each: an output names its whole loop cell. loop_path is the JSON array of every
-- enclosing for_each index, outermost first ('[1,0]'), NULL outside any for_each; loop_index
-- stays the innermost index. The JSON text is read the same way on DuckDB and PostgreSQL.
DROP VIEW wf_outputs;
CREATE VIEW wf_outputs AS
SELECT run_id, node_id, token, attempt,
       CAST(CAST(detail AS JSON) ->> 'loop_index' AS INTEGER) AS loop_index,
       CAST(CAST(detail AS JSON) ->> 'loop_path' AS VARCHAR) AS loop_path,
       occurred_at, output
FROM wf_events
WHERE kind = 'step.completed' AND output IS NOT NULL;
