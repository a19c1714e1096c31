-- Instant takeover. A lease holder's process keeps a session-level advisory lock, keyed by
-- `lease_key`, on a connection it holds open for as long as it lives. When the process
-- dies its connection closes and Postgres releases the lock at once, so another worker can
-- resume the deployment within a second instead of waiting for the lease to expire. The
-- lease stays the fence for a holder that is alive but cut off from the database: its
-- lock may still be held, but once its lease has expired and someone else claimed the
-- deployment, every journal write it attempts is refused.
ALTER TABLE deployments ADD COLUMN lease_key bigint;

-- Whether the process that took the advisory lock `key` (a bigint lock: classid holds the
-- high half, objid the low half, objsubid = 1) still holds it in this database.
CREATE FUNCTION pier_holder_alive(key bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND ((classid::bigint << 32) | objid::bigint) = key)
$$;
