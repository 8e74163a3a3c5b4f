-- Artifacts the engine stored (wf.Artifact results): one row per file, written in the
-- transaction of the checkpoint that records the attempt which stored it, so a row exists only
-- for an attempt that committed. A reference loads only when its URI has a row here and every
-- field of the reference matches it (docs/semantics.md §26). The rows belong to their run:
-- deleted (or archived) with its other rows.
CREATE TABLE wf_artifacts (
    uri        VARCHAR   PRIMARY KEY,   -- as the reference names it
    run_id     VARCHAR   NOT NULL,
    node_id    VARCHAR   NOT NULL,
    attempt    INTEGER   NOT NULL,
    size       BIGINT    NOT NULL,      -- bytes stored: a load reads no more
    sha256     VARCHAR   NOT NULL,      -- hex SHA-256 of those bytes
    format     VARCHAR   NOT NULL,      -- pandas, polars, numpy, bytes, text, file
    media_type VARCHAR   NOT NULL,
    name       VARCHAR,
    created_at TIMESTAMP NOT NULL
);
-- A purge deletes a run's rows by run_id.
CREATE INDEX wf_artifacts_run ON wf_artifacts (run_id);
