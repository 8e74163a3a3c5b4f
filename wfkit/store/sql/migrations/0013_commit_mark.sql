-- The DuckDB store's count of what a file holds (wfkit/store/marks.py): the rows of wf_events
-- plus this tally, which grows by one for each commit that records no event and by the events a
-- purge deletes, so that the sum grows with every commit and never goes down. The store keeps
-- the count it reached in <file>.commits and refuses to open a file that holds less. One row;
-- PostgreSQL has the table too (one schema) and leaves it at 0.
CREATE TABLE wf_store_tally (
    tally BIGINT NOT NULL
);
INSERT INTO wf_store_tally (tally) VALUES (0);

-- What happened to the store itself, not to a run: e.g. 'commits.lost', recorded when an
-- operator accepts that a file holds fewer commits than its engine made (detail: JSON counts).
CREATE TABLE wf_store_events (
    occurred_at TIMESTAMP NOT NULL,
    kind        VARCHAR   NOT NULL,
    actor       VARCHAR,
    detail      VARCHAR
);
