-- Named queries, loaded once by wfkit.store.queries. A block starts with "-- name: NAME".

-- name: schema_version
SELECT max(version) FROM wf_schema_version;

-- name: record_schema_version
INSERT INTO wf_schema_version (version, applied_at) VALUES (?, ?);

-- name: insert_definition
INSERT INTO wf_definitions (workflow_id, version, hash, graph, data_model, registered_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING;

-- name: latest_definition_version
SELECT max(version) FROM wf_definitions WHERE workflow_id = ?;

-- name: definitions
SELECT workflow_id, version, hash, graph, data_model, registered_at
FROM wf_definitions ORDER BY workflow_id, version, registered_at;

-- name: grown_definitions
-- The runs' own graphs grown by engine.append (not registered versions).
SELECT workflow_id, version, hash, grown_from FROM wf_definitions WHERE grown_from IS NOT NULL;

-- name: inactive_definitions
-- The (workflow id, version) pairs deactivated with engine.deactivate.
SELECT DISTINCT workflow_id, version FROM wf_definitions WHERE active = FALSE;

-- name: set_definition_active
UPDATE wf_definitions SET active = ? WHERE workflow_id = ? AND version = ?;

-- name: runs_in_flight
-- A run on a graph grown from the registered one (engine.append) counts by the graph it grew
-- from.
SELECT count(*) FROM wf_instances i
LEFT JOIN wf_definitions d
  ON d.workflow_id = i.workflow_id AND d.version = i.version AND d.hash = i.hash
WHERE i.workflow_id = ? AND i.version = ? AND coalesce(d.grown_from, i.hash) <> ?
  AND i.status NOT IN ('completed', 'failed', 'cancelled');

-- name: insert_grown_definition
INSERT INTO wf_definitions (workflow_id, version, hash, graph, data_model, registered_at, run_id,
                            grown_from)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING;

-- name: register_grown_definition
-- A graph first stored as a run's own grown graph is registered as a version of its own.
UPDATE wf_definitions SET run_id = NULL, grown_from = NULL
WHERE workflow_id = ? AND version = ? AND hash = ?;

-- name: repin_instance
UPDATE wf_instances SET hash = ? WHERE run_id = ?;

-- name: insert_instance
INSERT INTO wf_instances (run_id, workflow_id, version, hash, status, input, data, state, seq,
                          error, created_at, updated_at, ended_at, parent_run_id, actor)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: update_instance
UPDATE wf_instances
SET status = ?, data = ?, state = ?, seq = ?, error = ?, updated_at = ?, ended_at = ?
WHERE run_id = ?;

-- name: update_instance_snapshot
-- An ended run that gained events (run.restarted): its snapshot and last event number move on
-- with them; its status, data and times stand.
UPDATE wf_instances SET state = ?, seq = ? WHERE run_id = ?;

-- name: insert_event
INSERT INTO wf_events (run_id, seq, occurred_at, kind, node_id, token, attempt, started_at, actor, error,
                       output, patch, delta, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_log
INSERT INTO wf_logs (run_id, seq, line, node_id, token, activity, attempt, loop_path, logged_at,
                     level, message)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: run_logs
-- one run's log lines (of one node, one attempt), in the order their attempts were recorded
SELECT run_id, seq, line, node_id, token, activity, attempt, loop_path, logged_at, level, message
FROM wf_logs
WHERE run_id = ? AND (CAST(? AS VARCHAR) IS NULL OR node_id = ?)
  AND (CAST(? AS INTEGER) IS NULL OR attempt = ?)
ORDER BY seq, token, attempt, line;

-- name: insert_artifact
-- The artifacts an attempt stored, with the checkpoint that records it. A URI recorded already
-- (the same attempt's file, written again with the same content) keeps its first row.
INSERT INTO wf_artifacts (uri, run_id, node_id, attempt, size, sha256, format, media_type, name,
                          created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING;

-- name: insert_artifact_many
INSERT INTO wf_artifacts (uri, run_id, node_id, attempt, size, sha256, format, media_type, name,
                          created_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]),
       unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[])
ON CONFLICT DO NOTHING;

-- name: artifact_record
-- The record of one URI (wfkit.engine.artifact_records.ArtifactRecord.from_row).
SELECT uri, run_id, node_id, attempt, size, sha256, format, media_type, name, created_at
FROM wf_artifacts WHERE uri = ?;

-- name: artifact_records
-- The records of these URIs (wfkit.engine.artifact_records.ArtifactRecord.from_row).
SELECT uri, run_id, node_id, attempt, size, sha256, format, media_type, name, created_at
FROM wf_artifacts WHERE uri IN (SELECT unnest(?::VARCHAR[]));

-- name: run_ancestors
-- Each run's ancestors through parent_run_id (a call's child names its caller, a restart the
-- run it restarts), itself included: (the run asked about, an ancestor, links up). Parameters:
-- the runs, the most links followed.
WITH RECURSIVE up(start, run_id, parent_run_id, depth) AS (
    SELECT run_id, run_id, parent_run_id, 0
    FROM wf_instances WHERE run_id IN (SELECT unnest(?::VARCHAR[]))
    UNION ALL
    SELECT up.start, i.run_id, i.parent_run_id, up.depth + 1
    FROM up JOIN wf_instances i ON i.run_id = up.parent_run_id
    WHERE up.depth < ?
)
SELECT start, run_id, depth FROM up;

-- name: insert_bookmark
INSERT INTO wf_bookmarks (run_id, token, node_id, kind, name, key, since, deadline, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: delete_bookmark
DELETE FROM wf_bookmarks WHERE run_id = ? AND token = ?;

-- name: insert_timer
INSERT INTO wf_timers (run_id, token, node_id, kind, due_at) VALUES (?, ?, ?, ?, ?);

-- name: delete_timer
DELETE FROM wf_timers WHERE run_id = ? AND token = ? AND kind = ?;

-- name: delete_jobs
DELETE FROM wf_jobs WHERE run_id = ?;

-- name: insert_job
INSERT INTO wf_jobs (run_id, token, node_id, status, attempt, loop_index, updated_at, heartbeat_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: live_runs
SELECT run_id, workflow_id, version, hash, status, input, state, seq
FROM wf_instances
WHERE status NOT IN ('completed', 'failed', 'cancelled');

-- name: live_events
SELECT e.run_id, e.seq, e.patch, e.delta, e.output, e.node_id, e.detail
FROM wf_events e JOIN wf_instances i ON i.run_id = e.run_id
WHERE i.status NOT IN ('completed', 'failed', 'cancelled') AND e.seq > i.seq
ORDER BY e.run_id, e.seq;

-- name: run_row
SELECT run_id, workflow_id, version, hash, status, input, data, state, seq, error,
       created_at, updated_at, ended_at, parent_run_id, actor
FROM wf_instances WHERE run_id = ?;

-- name: run_events_after
SELECT run_id, seq, patch, delta, output, node_id, detail
FROM wf_events WHERE run_id = ? AND seq > ? ORDER BY seq;

-- name: run_history
SELECT run_id, seq, occurred_at, kind, node_id, token, attempt, started_at, actor, error, output, detail
FROM wf_events WHERE run_id = ? ORDER BY seq;

-- name: run_checkpoint_rows
-- one run's events with the data patch and cursor change each carries, oldest first (replay.py)
SELECT seq, occurred_at, kind, node_id, patch, delta FROM wf_events WHERE run_id = ? ORDER BY seq;

-- name: call_children
SELECT detail FROM wf_events WHERE run_id = ? AND kind = 'call.started' ORDER BY seq;

-- name: timers
SELECT run_id, token, node_id, kind, due_at FROM wf_timers ORDER BY due_at;

-- name: bookmarks
SELECT run_id, token, node_id, kind, name, key, since, deadline, detail
FROM wf_bookmarks ORDER BY since;

-- name: consume_bookmark
DELETE FROM wf_bookmarks WHERE kind = ? AND name = ? AND key IS NOT DISTINCT FROM ?
RETURNING run_id, token, node_id, kind, name, key, since, deadline, detail;

-- name: find_bookmark
-- (kind, name, key) with a key: `=` lets the lookup index serve it (IS NOT DISTINCT FROM does not)
SELECT run_id, token, node_id, kind, name, key, since, deadline, detail
FROM wf_bookmarks WHERE kind = ? AND name = ? AND key = ?
ORDER BY since LIMIT 1;

-- name: find_bookmarks
-- every open bookmark of (kind, name, key), oldest first (the approvals of one node of a run,
-- one per for_each item)
SELECT run_id, token, node_id, kind, name, key, since, deadline, detail
FROM wf_bookmarks WHERE kind = ? AND name = ? AND key = ?
ORDER BY since, token;

-- name: find_bookmark_keyless
SELECT run_id, token, node_id, kind, name, key, since, deadline, detail
FROM wf_bookmarks WHERE kind = ? AND name = ? AND key IS NULL
ORDER BY since LIMIT 1;

-- name: find_signal_waits
-- the open waits for one signal name and any of a list of keys (a round's signals together)
SELECT key, run_id, token, node_id
FROM wf_bookmarks
WHERE kind = 'signal' AND name = ? AND key IN (SELECT unnest(?::VARCHAR[]))
ORDER BY since;

-- name: run_rows
-- the summary rows of many runs (the columns of run_row)
SELECT run_id, workflow_id, version, hash, status, input, data, state, seq, error,
       created_at, updated_at, ended_at, parent_run_id, actor
FROM wf_instances WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: run_bookmarks
SELECT run_id, token, node_id, kind, name, key, since, deadline, detail
FROM wf_bookmarks WHERE run_id = ? ORDER BY since;

-- name: set_trace_context
UPDATE wf_instances SET trace_context = ? WHERE run_id = ?;

-- name: run_trace_context
SELECT trace_context, created_at FROM wf_instances WHERE run_id = ?;

-- name: trace_parked_at
-- when the token's latest wait began, and on what (the event that parked it)
SELECT occurred_at, kind FROM wf_events
WHERE run_id = ? AND token = ? AND kind IN (SELECT unnest(?::VARCHAR[]))
ORDER BY seq DESC
LIMIT 1;

-- name: run_timers
SELECT run_id, token, node_id, kind, due_at FROM wf_timers WHERE run_id = ? ORDER BY due_at;

-- name: list_runs
SELECT run_id, workflow_id, version, status, created_at, updated_at, ended_at, error, parent_run_id
FROM wf_instances
WHERE (CAST(? AS VARCHAR) IS NULL OR status = ?) AND (CAST(? AS VARCHAR) IS NULL OR workflow_id = ?)
ORDER BY created_at DESC, run_id
LIMIT ?;

-- Column-wise forms: each parameter is a list holding one column, so one statement writes
-- any number of rows (binding lists is ~10x cheaper per row than VALUES tuples in DuckDB).

-- name: insert_event_many
INSERT INTO wf_events (run_id, seq, occurred_at, kind, node_id, token, attempt, started_at, actor,
                       error, output, patch, delta, detail)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::TIMESTAMP[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: insert_instance_many
INSERT INTO wf_instances (run_id, workflow_id, version, hash, status, input, data, state, seq,
                          error, created_at, updated_at, ended_at, parent_run_id, actor)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]), unnest(?::TIMESTAMP[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: update_instance_many
UPDATE wf_instances
SET status = v.status, data = v.data, state = v.state, seq = v.seq, error = v.error,
    updated_at = v.updated_at, ended_at = v.ended_at
FROM (SELECT unnest(?::VARCHAR[]) AS status, unnest(?::VARCHAR[]) AS data,
             unnest(?::VARCHAR[]) AS state, unnest(?::BIGINT[]) AS seq,
             unnest(?::VARCHAR[]) AS error, unnest(?::TIMESTAMP[]) AS updated_at,
             unnest(?::TIMESTAMP[]) AS ended_at, unnest(?::VARCHAR[]) AS run_id) AS v
WHERE wf_instances.run_id = v.run_id;

-- name: insert_log_many
INSERT INTO wf_logs (run_id, seq, line, node_id, token, activity, attempt, loop_path, logged_at,
                     level, message)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: insert_job_many
INSERT INTO wf_jobs (run_id, token, node_id, status, attempt, loop_index, updated_at, heartbeat_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::INTEGER[]), unnest(?::INTEGER[]), unnest(?::TIMESTAMP[]), unnest(?::TIMESTAMP[]);

-- name: delete_jobs_many
DELETE FROM wf_jobs WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: insert_bookmark_many
INSERT INTO wf_bookmarks (run_id, token, node_id, kind, name, key, since, deadline, detail)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]);

-- name: delete_bookmark_many
DELETE FROM wf_bookmarks USING (SELECT unnest(?::VARCHAR[]) AS run_id,
                                      unnest(?::VARCHAR[]) AS token) AS v
WHERE wf_bookmarks.run_id = v.run_id AND wf_bookmarks.token = v.token;

-- name: insert_timer_many
INSERT INTO wf_timers (run_id, token, node_id, kind, due_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::TIMESTAMP[]);

-- name: delete_timer_many
DELETE FROM wf_timers USING (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS token,
                                    unnest(?::VARCHAR[]) AS kind) AS v
WHERE wf_timers.run_id = v.run_id AND wf_timers.token = v.token AND wf_timers.kind = v.kind;

-- name: insert_saga_step
INSERT INTO wf_saga_steps (run_id, saga_id, node_id, token, compensation, position, status,
                           updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: update_saga_step
UPDATE wf_saga_steps SET status = ?, updated_at = ? WHERE run_id = ? AND position = ?;

-- name: insert_posted_signal
INSERT INTO wf_signals (signal_id, name, key, payload, posted_at, expires_at, actor)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: posted_keys
SELECT DISTINCT name, key FROM wf_signals;

-- name: first_posted_signal
SELECT signal_id, payload, actor, expires_at FROM wf_signals
WHERE name = ? AND key IS NOT DISTINCT FROM ? AND (expires_at IS NULL OR expires_at > ?)
ORDER BY posted_at, signal_id;

-- name: delete_posted_signal
DELETE FROM wf_signals WHERE signal_id = ?;

-- name: delete_expired_signals
DELETE FROM wf_signals WHERE expires_at IS NOT NULL AND expires_at <= ?;

-- name: instance_origin
SELECT workflow_id, version, hash, input, status FROM wf_instances WHERE run_id = ?;

-- Run leases (shared databases only). `claim_runs` takes runs nobody holds (new, or whose owner
-- died) that have work; `claim_run` takes one run for a signal, timer or operator command.

-- name: claim_runs
-- Also says whether the run had an owner (whose lease ran out: its process died, so the steps
-- it had started may have crashed with it) and the queue it was handed over for; skips the runs
-- this engine backs off from (the fourth parameter; unless another engine, not this one, the
-- fifth, has since handed the run over for a queue), and runs handed over for a queue it does
-- not serve (the second parameter is true for an engine that serves every queue, the third the
-- queues it serves).
-- The runs come back oldest first (an UPDATE returns its rows in no set order), so runs
-- started one after the other are taken up in that order.
WITH free AS (
    SELECT run_id, owner, wants_queue, updated_at, created_at FROM wf_instances
    WHERE status IN ('pending', 'running', 'compensating')
      AND (owner IS NULL OR lease_until < ?)
      AND (wants_queue IS NULL OR ? OR wants_queue = ANY(?))
      AND (NOT (run_id = ANY(?)) OR (wants_queue IS NOT NULL AND handed_by IS DISTINCT FROM ?))
    ORDER BY updated_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED),
taken AS (
    UPDATE wf_instances AS i SET owner = ?, lease_until = ?, wants_queue = NULL, handed_by = NULL
    FROM free WHERE i.run_id = free.run_id
    RETURNING i.run_id, free.owner IS NOT NULL AND free.owner <> ? AS lapsed, free.wants_queue,
        free.updated_at, free.created_at)
SELECT run_id, lapsed, wants_queue FROM taken ORDER BY updated_at, created_at, run_id;

-- name: claim_run
-- Also says whether the run was taken from another owner whose lease ran out (see claim_runs).
WITH one AS (
    SELECT run_id, owner FROM wf_instances
    WHERE run_id = ? AND (owner IS NULL OR owner = ? OR lease_until < ?)
    FOR UPDATE)
UPDATE wf_instances AS i SET owner = ?, lease_until = ?, wants_queue = NULL, handed_by = NULL
FROM one WHERE i.run_id = one.run_id
RETURNING i.run_id, one.owner IS NOT NULL AND one.owner <> ?;

-- name: renew_leases
UPDATE wf_instances SET lease_until = ? WHERE owner = ? AND run_id = ANY(?);

-- name: release_runs
UPDATE wf_instances SET owner = NULL, lease_until = NULL, wants_queue = NULL,
    handed_by = NULL
WHERE owner = ? AND run_id = ANY(?);

-- name: run_wants_queue
SELECT wants_queue FROM wf_instances WHERE run_id = ?;

-- name: hand_over_run
-- Release a run for the engines that serve the queue its ready steps wait for (see claim_runs).
UPDATE wf_instances SET owner = NULL, lease_until = NULL, wants_queue = ?, handed_by = owner
WHERE owner = ? AND run_id = ?;

-- name: due_timers
SELECT run_id, token, node_id, kind, due_at FROM wf_timers WHERE due_at <= ? ORDER BY due_at
LIMIT ?;

-- name: next_timer
SELECT min(due_at) FROM wf_timers;

-- name: notify_work
SELECT pg_notify('wfkit_work', ?);

-- name: owned_runs
SELECT run_id FROM wf_instances WHERE owner = ?;

-- name: copy_wf_definitions
-- Copying a whole store into another (wfkit.store.copy): one block per table listing EVERY
-- column, and its column-wise form for many rows. wfkit.store.copy reads the column lists from
-- these blocks and checks them against both databases, so a migration that adds a column must
-- add it here too (or name it in wfkit.store.copy.NOT_COPIED).
INSERT INTO wf_definitions (workflow_id, version, hash, graph, data_model, registered_at, run_id,
                            grown_from, active)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING;

-- name: copy_wf_definitions_many
INSERT INTO wf_definitions (workflow_id, version, hash, graph, data_model, registered_at, run_id,
                            grown_from, active)
SELECT unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::BOOLEAN[]);

-- name: copy_wf_instances
INSERT INTO wf_instances (run_id, workflow_id, version, hash, status, input, data, state, seq,
                          error, created_at, updated_at, ended_at, parent_run_id, actor,
                          trace_context)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_instances_many
INSERT INTO wf_instances (run_id, workflow_id, version, hash, status, input, data, state, seq,
                          error, created_at, updated_at, ended_at, parent_run_id, actor,
                          trace_context)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]), unnest(?::TIMESTAMP[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: copy_wf_events
INSERT INTO wf_events (run_id, seq, occurred_at, kind, node_id, token, attempt, started_at, actor,
                       error, output, patch, delta, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_events_many
INSERT INTO wf_events (run_id, seq, occurred_at, kind, node_id, token, attempt, started_at, actor,
                       error, output, patch, delta, detail)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::TIMESTAMP[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: copy_wf_jobs
INSERT INTO wf_jobs (run_id, token, node_id, status, attempt, loop_index, updated_at, heartbeat_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_jobs_many
INSERT INTO wf_jobs (run_id, token, node_id, status, attempt, loop_index, updated_at, heartbeat_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::INTEGER[]), unnest(?::INTEGER[]), unnest(?::TIMESTAMP[]), unnest(?::TIMESTAMP[]);

-- name: copy_wf_bookmarks
INSERT INTO wf_bookmarks (run_id, token, node_id, kind, name, key, since, deadline, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_bookmarks_many
INSERT INTO wf_bookmarks (run_id, token, node_id, kind, name, key, since, deadline, detail)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]);

-- name: copy_wf_timers
INSERT INTO wf_timers (run_id, token, node_id, kind, due_at) VALUES (?, ?, ?, ?, ?);

-- name: copy_wf_timers_many
INSERT INTO wf_timers (run_id, token, node_id, kind, due_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::TIMESTAMP[]);

-- name: copy_wf_saga_steps
INSERT INTO wf_saga_steps (run_id, saga_id, node_id, token, compensation, position, status,
                           updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_saga_steps_many
INSERT INTO wf_saga_steps (run_id, saga_id, node_id, token, compensation, position, status,
                           updated_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]);

-- name: copy_wf_signals
INSERT INTO wf_signals (signal_id, name, key, payload, posted_at, expires_at, actor)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_signals_many
INSERT INTO wf_signals (signal_id, name, key, payload, posted_at, expires_at, actor)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::TIMESTAMP[]), unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]);

-- name: copy_wf_logs
INSERT INTO wf_logs (run_id, seq, line, node_id, token, activity, attempt, loop_path, logged_at,
                     level, message)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_logs_many
INSERT INTO wf_logs (run_id, seq, line, node_id, token, activity, attempt, loop_path, logged_at,
                     level, message)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]),
       unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: copy_wf_artifacts
INSERT INTO wf_artifacts (uri, run_id, node_id, attempt, size, sha256, format, media_type, name,
                          created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: copy_wf_artifacts_many
INSERT INTO wf_artifacts (uri, run_id, node_id, attempt, size, sha256, format, media_type, name,
                          created_at)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[]),
       unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::TIMESTAMP[]);

-- name: fail_unwritable_run
-- A run whose checkpoint the store refused (a value it cannot hold), isolated from its batch:
-- it fails as it last stood, and gives up its waits and timers (the two blocks below).
UPDATE wf_instances SET status = 'failed', error = ?, updated_at = ?, ended_at = ?, owner = NULL,
                        lease_until = NULL
WHERE run_id = ?;

-- name: last_event_seq
SELECT coalesce(max(seq), 0) FROM wf_events WHERE run_id = ?;

-- name: delete_run_timers
DELETE FROM wf_timers WHERE run_id = ?;

-- name: delete_run_bookmarks
DELETE FROM wf_bookmarks WHERE run_id = ?;

-- Retention (wfkit.engine.retention): ended runs older than a cutoff go with every row keyed
-- by their run_id, in one transaction. The run rows are deleted first, so the runs deleted are
-- exactly those whose rows follow (on a shared database a second purge at the same time waits
-- for the first and then finds nothing left). Definitions stay, a run's grown graph included
-- (wf_definitions.run_id names the run that grew it first; other runs may pin the same graph). The `take` forms return the rows they delete
-- (archive: the rows written to Parquet are the rows deleted). A table keyed by run_id needs
-- both blocks here and a place in wfkit.store.copy.TABLES (tests/engine/test_retention.py
-- checks every such table of the schema).

-- name: retention_delete_wf_instances
-- parameters: the ended statuses wanted, the cutoff, the most runs to take. A child run whose
-- caller (parent_run_id) is still in flight stays until the caller ends too.
DELETE FROM wf_instances
WHERE run_id IN (SELECT c.run_id FROM wf_instances c
                 WHERE c.status IN ('completed', 'failed', 'cancelled')
                   AND c.status IN (SELECT unnest(?::VARCHAR[])) AND c.ended_at <= ?
                   AND NOT EXISTS (SELECT 1 FROM wf_instances p
                                   WHERE p.run_id = c.parent_run_id
                                     AND p.status NOT IN ('completed', 'failed', 'cancelled'))
                 ORDER BY c.ended_at, c.run_id LIMIT ?)
  AND status IN ('completed', 'failed', 'cancelled')
RETURNING run_id;

-- name: retention_take_wf_instances
DELETE FROM wf_instances
WHERE run_id IN (SELECT c.run_id FROM wf_instances c
                 WHERE c.status IN ('completed', 'failed', 'cancelled')
                   AND c.status IN (SELECT unnest(?::VARCHAR[])) AND c.ended_at <= ?
                   AND NOT EXISTS (SELECT 1 FROM wf_instances p
                                   WHERE p.run_id = c.parent_run_id
                                     AND p.status NOT IN ('completed', 'failed', 'cancelled'))
                 ORDER BY c.ended_at, c.run_id LIMIT ?)
  AND status IN ('completed', 'failed', 'cancelled')
RETURNING *;

-- name: retention_delete_wf_events
DELETE FROM wf_events WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_events
DELETE FROM wf_events WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_jobs
DELETE FROM wf_jobs WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_jobs
DELETE FROM wf_jobs WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_bookmarks
DELETE FROM wf_bookmarks WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_bookmarks
DELETE FROM wf_bookmarks WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_timers
DELETE FROM wf_timers WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_timers
DELETE FROM wf_timers WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_saga_steps
DELETE FROM wf_saga_steps WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_saga_steps
DELETE FROM wf_saga_steps WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_logs
DELETE FROM wf_logs WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_logs
DELETE FROM wf_logs WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: retention_delete_wf_artifacts
DELETE FROM wf_artifacts WHERE run_id IN (SELECT unnest(?::VARCHAR[]));

-- name: retention_take_wf_artifacts
DELETE FROM wf_artifacts WHERE run_id IN (SELECT unnest(?::VARCHAR[])) RETURNING *;

-- name: metrics_runs
SELECT workflow_id, status, count(*) FROM wf_instances GROUP BY workflow_id, status;

-- name: metrics_waits
SELECT kind, count(*), min(since) FROM wf_bookmarks GROUP BY kind;

-- name: store_count_tables
-- Which of the tables the DuckDB store's commit count reads exist (before migrating a file).
SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_catalog = current_database()
  AND table_name IN ('wf_events', 'wf_store_tally');

-- name: store_commit_count
-- What a DuckDB file holds of its commits (wfkit/store/marks.py): its events plus the tally.
SELECT (SELECT count(*) FROM wf_events) + (SELECT coalesce(sum(tally), 0) FROM wf_store_tally);

-- name: store_event_count
-- The same for a file from before migration 13, which has no tally.
SELECT count(*) FROM wf_events;

-- name: add_store_tally
UPDATE wf_store_tally SET tally = tally + ?;

-- name: insert_store_event
INSERT INTO wf_store_events (occurred_at, kind, actor, detail) VALUES (?, ?, ?, ?);

-- name: store_events
SELECT occurred_at, kind, actor, detail FROM wf_store_events ORDER BY occurred_at;
