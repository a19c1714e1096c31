//! A process's liveness: the session-level advisory lock it holds on its listening
//! connection, and its registration on the server instance that holds the lock (migration
//! 0022), which is what lets a missing lock mean "dead" and not "failed over".

use sqlx::PgExecutor;

use super::Result;

/// Takes the liveness lock `key` on `conn` and registers it on this server instance, in one
/// statement on that connection (the lock and its registration must be on the same
/// server). `false`: another session holds the lock, and nothing was registered.
///
/// Registrations of earlier server instances, and of holders that are gone with nothing of
/// theirs running, are pruned on the way, so the table stays as small as the set of live
/// processes and of deployments still waiting for their takeover.
pub async fn take_liveness<'c>(conn: impl PgExecutor<'c>, key: i64) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "WITH locked AS (SELECT pg_try_advisory_lock($1) AS ok),
         pruned AS (
           DELETE FROM pier_holders h
           WHERE (SELECT ok FROM locked) AND h.key <> $1
             AND (h.instance <> pg_postmaster_start_time()
                  OR (NOT pier_holder_alive(h.key)
                      AND NOT EXISTS (SELECT 1 FROM deployments d
                                      WHERE d.state = 'running' AND d.lease_key = h.key)))),
         registered AS (
           INSERT INTO pier_holders (key, instance)
           SELECT $1, pg_postmaster_start_time() FROM locked WHERE ok
           ON CONFLICT (key) DO UPDATE SET instance = EXCLUDED.instance)
         SELECT ok FROM locked",
    )
    .bind(key)
    .fetch_one(conn)
    .await?)
}
