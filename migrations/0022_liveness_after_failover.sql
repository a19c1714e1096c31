-- Issue 28: the liveness locks after a failover. A promoted standby holds none of the
-- session-level advisory locks the old primary held (nor does a restarted server), so every
-- running deployment's holder looks dead there at once, and the first process to reconnect
-- used to take over deployments whose holders were alive and only reconnecting more slowly:
-- a second run of the same deployment.
--
-- A missing lock now means "dead" only for a holder that took its lock on THIS server
-- instance: each process registers its key here right after taking its lock. The table is
-- UNLOGGED, so it is empty on a promoted standby (unlogged tables are not replicated) and
-- after a crash; the instance (the postmaster's start time) tells a clean restart apart.
-- A holder that died before registering again is taken over when its lease expires, as one
-- cut off from the database always was.
CREATE UNLOGGED TABLE pier_holders (
    key bigint PRIMARY KEY,
    instance timestamptz NOT NULL
);

-- Whether the holder `key` took its liveness lock on this server instance and no longer
-- holds it: its process died (or lost its connection) since.
CREATE FUNCTION pier_holder_gone(key bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pier_holders h
        WHERE h.key = $1 AND h.instance = pg_postmaster_start_time())
      AND NOT pier_holder_alive($1)
$$;
