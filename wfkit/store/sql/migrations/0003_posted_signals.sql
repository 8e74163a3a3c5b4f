-- Signals posted before their wait is reached: kept until a matching wait takes them
-- (first in, first out) or until they expire.
CREATE TABLE wf_signals (
    signal_id  VARCHAR   PRIMARY KEY,
    name       VARCHAR   NOT NULL,
    key        VARCHAR,
    payload    VARCHAR   NOT NULL,
    posted_at  TIMESTAMP NOT NULL,
    expires_at TIMESTAMP,
    actor      VARCHAR
);
