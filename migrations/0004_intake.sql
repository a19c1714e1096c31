-- Replay protection for senders that sign only their body: an authentic body accepted once
-- is not accepted again under another delivery id. Only sources whose body is unique per
-- event store its hash (see SourceKind::body_is_unique); the index makes the rule hold
-- for any number of Pier processes sharing the database.
ALTER TABLE deliveries ADD COLUMN body_sha256 bytea;
CREATE UNIQUE INDEX deliveries_body_once ON deliveries (source, body_sha256)
    WHERE body_sha256 IS NOT NULL;
