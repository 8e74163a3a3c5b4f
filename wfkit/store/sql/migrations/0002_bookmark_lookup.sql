-- Signals find their wait by (kind, name, key): an index keeps that a point lookup when many
-- runs are parked.
CREATE INDEX wf_bookmarks_lookup ON wf_bookmarks (kind, name, key);
