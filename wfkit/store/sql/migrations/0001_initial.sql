-- wfkit schema v1, in SQL that DuckDB and PostgreSQL both read. Times are UTC (TIMESTAMP
-- without zone); JSON columns hold JSON text.

CREATE TABLE wf_definitions (
    workflow_id   VARCHAR   NOT NULL,
    version       INTEGER   NOT NULL,
    hash          VARCHAR   NOT NULL,   -- content hash of the graph: runs pin (id, version, hash)
    graph         VARCHAR   NOT NULL,   -- Workflow.to_json()
    data_model    VARCHAR,              -- 'module:Qualname' of the data model, if any
    registered_at TIMESTAMP NOT NULL,
    PRIMARY KEY (workflow_id, version, hash)
);

CREATE TABLE wf_instances (
    run_id        VARCHAR   PRIMARY KEY,
    workflow_id   VARCHAR   NOT NULL,
    version       INTEGER   NOT NULL,
    hash          VARCHAR   NOT NULL,
    status        VARCHAR   NOT NULL,   -- pending running waiting suspended compensating completed failed cancelled
    input         VARCHAR   NOT NULL,   -- the data document the run was admitted with
    data          VARCHAR,              -- the data document as of the last summary
    state         VARCHAR,              -- engine cursor snapshot as of `seq`
    seq           BIGINT    NOT NULL,   -- last checkpoint folded into `state`
    error         VARCHAR,
    created_at    TIMESTAMP NOT NULL,
    updated_at    TIMESTAMP NOT NULL,
    ended_at      TIMESTAMP,
    parent_run_id VARCHAR,              -- lineage: the run this one restarts
    actor         VARCHAR
);

-- The append-only checkpoint log: every transition of every run is a row here.
CREATE TABLE wf_events (
    run_id     VARCHAR   NOT NULL,
    seq        BIGINT    NOT NULL,      -- per run, increasing
    occurred_at TIMESTAMP NOT NULL,
    kind       VARCHAR   NOT NULL,      -- run.started, step.completed, step.failed, ...
    node_id    VARCHAR,
    token      VARCHAR,
    attempt    INTEGER,
    started_at TIMESTAMP,               -- for attempts: when the attempt began
    actor      VARCHAR,
    error      VARCHAR,                 -- error text with traceback
    output     VARCHAR,                 -- JSON output of a completed step
    patch      VARCHAR,                 -- JSON Patch applied to the data document
    delta      VARCHAR,                 -- JSON changes to the engine cursor
    detail     VARCHAR                  -- JSON extra facts (outlet taken, loop index, ...)
);

CREATE VIEW wf_outputs AS
SELECT run_id, node_id, token, attempt,
       CAST(CAST(detail AS JSON) ->> 'loop_index' AS INTEGER) AS loop_index,
       occurred_at, output
FROM wf_events
WHERE kind = 'step.completed' AND output IS NOT NULL;

-- Steps ready or running in live runs (a summary; the engine's ready queue is authoritative).
CREATE TABLE wf_jobs (
    run_id       VARCHAR   NOT NULL,
    token        VARCHAR   NOT NULL,
    node_id      VARCHAR   NOT NULL,
    status       VARCHAR   NOT NULL,    -- ready, running, retry
    attempt      INTEGER   NOT NULL,
    loop_index   INTEGER,
    updated_at   TIMESTAMP NOT NULL,
    heartbeat_at TIMESTAMP
);

-- A waiting token is one row here: no job, no thread.
CREATE TABLE wf_bookmarks (
    run_id   VARCHAR   NOT NULL,
    token    VARCHAR   NOT NULL,
    node_id  VARCHAR   NOT NULL,
    kind     VARCHAR   NOT NULL,        -- signal or approval
    name     VARCHAR   NOT NULL,        -- signal name, or the approval node id
    key      VARCHAR,                   -- correlation key
    since    TIMESTAMP NOT NULL,
    deadline TIMESTAMP,
    detail   VARCHAR
);

CREATE TABLE wf_timers (
    run_id  VARCHAR   NOT NULL,
    token   VARCHAR   NOT NULL,
    node_id VARCHAR   NOT NULL,
    kind    VARCHAR   NOT NULL,         -- delay, retry, timeout, expiry
    due_at  TIMESTAMP NOT NULL
);

CREATE TABLE wf_saga_steps (
    run_id       VARCHAR   NOT NULL,
    saga_id      VARCHAR   NOT NULL,
    node_id      VARCHAR   NOT NULL,
    token        VARCHAR   NOT NULL,
    compensation VARCHAR   NOT NULL,
    position     INTEGER   NOT NULL,
    status       VARCHAR   NOT NULL,    -- done, compensating, compensated, skipped, failed
    updated_at   TIMESTAMP NOT NULL
);
