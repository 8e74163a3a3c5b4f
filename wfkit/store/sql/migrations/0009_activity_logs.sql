-- Activity log lines: the records at INFO and above an attempt wrote through ctx.logger (at most
-- 200 lines and 64 KiB per attempt), written in the same transaction as the checkpoint that
-- records the attempt. They belong to their run: delete them with its other rows.
CREATE TABLE wf_logs (
    run_id    VARCHAR   NOT NULL,
    seq       BIGINT    NOT NULL,   -- the wf_events row that recorded the attempt's outcome
    line      INTEGER   NOT NULL,   -- 0, 1, ... in the order the attempt logged them
    node_id   VARCHAR   NOT NULL,
    token     VARCHAR   NOT NULL,
    activity  VARCHAR   NOT NULL,   -- the activity (or compensation) that logged
    attempt   INTEGER   NOT NULL,
    loop_path VARCHAR,              -- JSON array of the for_each indexes, NULL outside any
    logged_at TIMESTAMP NOT NULL,
    level     VARCHAR   NOT NULL,   -- INFO, WARNING, ERROR, CRITICAL (or a custom level's name)
    message   VARCHAR   NOT NULL
);
