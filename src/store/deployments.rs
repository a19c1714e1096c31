use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::kinds::{DeploymentState, Trigger};
use super::text::{pg_opt, pg_text};
use super::{Result, Store, StoreError};

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Deployment {
    pub id: Uuid,
    pub app: String,
    pub trigger: Trigger,
    pub delivery_id: Option<Uuid>,
    pub image: String,
    pub requested_tag: Option<String>,
    pub claimed_digest: Option<String>,
    pub pinned: bool,
    pub resolved_digest: Option<String>,
    pub platform: Option<String>,
    pub state: DeploymentState,
    pub attempt: i32,
    #[serde(skip)]
    pub lease_owner: Option<String>,
    #[serde(skip)]
    pub lease_key: Option<i64>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub superseded_by: Option<Uuid>,
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub candidate_logs: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// Who asked for it by hand (an operator action); `None` for pushes and the poller.
    pub requested_by: Option<String>,
    /// Who asked to cancel or stop it, and when.
    pub cancel_requested_by: Option<String>,
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// When it passed its gates (a resumed run is not held again).
    pub gated_at: Option<DateTime<Utc>>,
    /// Why it waits, while it is `awaiting_approval` or `awaiting_window`.
    pub waiting_for: Option<String>,
    /// Until when: an approval's expiry, a window's opening, a freeze's end.
    pub waiting_until: Option<DateTime<Utc>>,
    /// A promotion's source deployment (of the app it was promoted from).
    pub promoted_from: Option<Uuid>,
}

impl Deployment {
    pub(crate) fn short_id(&self) -> String {
        self.id.simple().to_string()[..8].to_owned()
    }
}

#[derive(Debug, Clone)]
pub struct NewDeployment {
    pub app: String,
    pub trigger: Trigger,
    pub delivery_id: Option<Uuid>,
    pub image: String,
    pub requested_tag: Option<String>,
    pub claimed_digest: Option<String>,
    /// The operator named the digest: deploy exactly it, do not resolve the tag.
    pub pinned: bool,
}

/// What asking for a deployment did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Enqueued {
    /// A new queued deployment; `superseded` lists the queued ones it replaced.
    Queued {
        id: Uuid,
        app: String,
        superseded: Vec<Uuid>,
    },
    /// The same digest is already queued or running for this app.
    AlreadyPending { id: Uuid, app: String },
}

/// The generation that serves an app now, as the `switch` step recorded it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Generation {
    pub app: String,
    /// The engine this generation serves on.
    pub target: String,
    pub deployment_id: Uuid,
    pub digest: String,
    pub container_id: String,
    pub switched_at: DateTime<Utc>,
}

/// A guarded update touched its one row, or the lease was not (or no longer) ours.
fn held(rows: u64) -> Result<()> {
    if rows == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost)
    }
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// The app's enqueue lock, held until the transaction ends (taking it twice in one
/// transaction is fine: advisory locks stack).
pub(super) async fn lock_app(tx: &mut Transaction<'_, Postgres>, app: &str) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('pier:app:' || $1))")
        .bind(app)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The enqueue locks of several apps at once, taken in one fixed order (by lock key), so
/// that two transactions locking overlapping sets of apps cannot deadlock: a batch of
/// deliveries locks every app it touches up front, in this order, before writing anything.
pub(super) async fn lock_apps(tx: &mut Transaction<'_, Postgres>, apps: &[&str]) -> Result<()> {
    if apps.is_empty() {
        return Ok(());
    }
    // The aggregate consumes the sorted subquery's rows in order: locks go key by key.
    sqlx::query(
        "SELECT count(pg_advisory_xact_lock(k)) FROM (
           SELECT DISTINCT hashtext('pier:app:' || a) AS k FROM unnest($1::text[]) AS a
           ORDER BY k) AS keys",
    )
    .bind(apps)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Per app, enqueueing is serialized by an advisory lock so that concurrent deliveries
/// cannot both see "nothing queued" and race on the one-queued-per-app index.
pub(super) async fn enqueue_in(
    tx: &mut Transaction<'_, Postgres>,
    d: NewDeployment,
) -> Result<Enqueued> {
    enqueue_as(tx, d, None).await
}

/// [`enqueue_in`], recording who asked for the deployment by hand.
pub(super) async fn enqueue_as(
    tx: &mut Transaction<'_, Postgres>,
    d: NewDeployment,
    requested_by: Option<&str>,
) -> Result<Enqueued> {
    lock_app(tx, &d.app).await?;
    enqueue_locked(tx, d, requested_by).await
}

/// [`enqueue_in`] for a transaction that already holds the app's lock ([`lock_apps`]).
/// The rule (the same digest is not queued twice, a newer deployment supersedes the queued
/// one) is `pier_enqueue_many` (migration 0028), the one writer of new deployments, of
/// which `pier_enqueue` is the case of one request; a batch of deliveries calls it once per
/// app for all of its pushes to that app.
pub(super) async fn enqueue_locked(
    tx: &mut Transaction<'_, Postgres>,
    d: NewDeployment,
    requested_by: Option<&str>,
) -> Result<Enqueued> {
    let sqlx::types::Json(enqueued) =
        sqlx::query_scalar("SELECT pier_enqueue($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(&d.app)
            .bind(d.trigger.as_str())
            .bind(d.delivery_id)
            .bind(&d.image)
            .bind(&d.requested_tag)
            .bind(&d.claimed_digest)
            .bind(d.pinned)
            .bind(pg_opt(requested_by))
            .fetch_one(&mut **tx)
            .await?;
    Ok(enqueued)
}

impl Store {
    pub async fn enqueue(&self, d: NewDeployment) -> Result<Enqueued> {
        let mut tx = self.begin().await?;
        let out = enqueue_in(&mut tx, d).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Claims the oldest runnable deployment: a running one whose holder is gone (its
    /// process's liveness lock was released when its connection closed) or whose lease
    /// expired (a holder cut off from the database), before any queued one; a queued one
    /// only when nothing runs for its app. The partial unique index on running deployments
    /// is the final guard: losing that race is "nothing claimed", not an error.
    ///
    /// A deployment held by this very process (`liveness_key`) is never taken over for a
    /// missing liveness lock, only for an expired lease: right after a database restart the
    /// lock is gone before the listener notices, and the process's own workers would
    /// otherwise take one deployment from each other until it gave up.
    ///
    /// Nor is a deployment of another process taken over for a lock that this server never
    /// saw taken (`pier_holder_gone`, migration 0022): after a failover the promoted standby
    /// holds no lock at all, and its holders are alive, re-taking them as they reconnect.
    pub async fn claim(
        &self,
        owner: &str,
        liveness_key: i64,
        lease: Duration,
    ) -> Result<Option<Deployment>> {
        let res = sqlx::query_as::<_, Deployment>(
            "WITH candidate AS (
               SELECT d.id FROM deployments d
               WHERE (d.state = 'running'
                      AND (d.lease_expires_at < now()
                           OR (d.lease_key IS NOT NULL AND d.lease_key <> $2
                               AND pier_holder_gone(d.lease_key))))
                  OR (d.state = 'queued' AND NOT EXISTS (
                        SELECT 1 FROM deployments r WHERE r.app = d.app AND r.state = 'running'))
                  -- A wait whose time came (a window opens, a freeze or an
                  -- approval request ends) is claimed to be judged again.
                  OR (d.state IN ('awaiting_approval', 'awaiting_window')
                      AND d.waiting_until <= now() AND NOT EXISTS (
                        SELECT 1 FROM deployments r WHERE r.app = d.app AND r.state = 'running'))
               ORDER BY (d.state = 'running') DESC, d.created_at
               LIMIT 1
               FOR UPDATE SKIP LOCKED
             )
             UPDATE deployments d
             SET state = 'running', attempt = d.attempt + 1, lease_owner = $1, lease_key = $2,
                 lease_expires_at = now() + $3 * interval '1 millisecond',
                 started_at = coalesce(d.started_at, now()), updated_at = now()
             FROM candidate WHERE d.id = candidate.id
             RETURNING d.*",
        )
        .bind(owner)
        .bind(liveness_key)
        .bind(millis(lease))
        .fetch_optional(&self.pool)
        .await;
        match res {
            Ok(d) => Ok(d),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The deployment this worker's last claim took, when the claim's answer was lost (the
    /// connection broke after the commit, as in a failover): the same claim taken up
    /// again, not a new attempt, instead of leaving the row to wait out its lease as if
    /// its worker had died. Asked only after a claim that failed.
    pub(crate) async fn retake_unanswered_claim(
        &self,
        owner: &str,
        liveness_key: i64,
        lease: Duration,
    ) -> Result<Option<Deployment>> {
        let d = sqlx::query_as::<_, Deployment>(
            "UPDATE deployments
             SET lease_key = $2, lease_expires_at = now() + $3 * interval '1 millisecond',
                 updated_at = now()
             WHERE state = 'running' AND lease_owner = $1
             RETURNING *",
        )
        .bind(owner)
        .bind(liveness_key)
        .bind(millis(lease))
        .fetch_optional(&self.pool)
        .await?;
        Ok(d)
    }

    /// Extends the lease; `LeaseLost` when another worker took the deployment over.
    pub async fn heartbeat(&self, id: Uuid, owner: &str, lease: Duration) -> Result<()> {
        let n = sqlx::query(
            "UPDATE deployments SET lease_expires_at = now() + $3 * interval '1 millisecond'
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .bind(millis(lease))
        .execute(&self.pool)
        .await?
        .rows_affected();
        held(n)
    }

    pub async fn set_resolved(
        &self,
        id: Uuid,
        owner: &str,
        digest: &str,
        platform: &str,
    ) -> Result<()> {
        let n = sqlx::query(
            "UPDATE deployments SET resolved_digest = $3, platform = $4, updated_at = now()
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .bind(digest)
        .bind(platform)
        .execute(&self.pool)
        .await?
        .rows_affected();
        held(n)
    }

    /// Moves a running deployment to its final state; only its lease holder may.
    pub async fn finish(
        &self,
        id: Uuid,
        owner: &str,
        state: DeploymentState,
        outcome: &str,
        error: Option<&str>,
        candidate_logs: Option<&str>,
    ) -> Result<()> {
        debug_assert!(state.is_final());
        let n = sqlx::query(
            "UPDATE deployments
             SET state = $3, outcome = $4, error = $5, candidate_logs = $6,
                 finished_at = now(), updated_at = now(),
                 lease_owner = NULL, lease_key = NULL, lease_expires_at = NULL
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .bind(state)
        .bind(pg_text(outcome))
        .bind(pg_opt(error))
        .bind(pg_opt(candidate_logs))
        .execute(&self.pool)
        .await?
        .rows_affected();
        held(n)
    }

    /// Gives a deployment back to the queue on shutdown: its lease ends now, so the next
    /// worker resumes it from the journal without waiting for the lease to expire.
    pub(crate) async fn release(&self, id: Uuid, owner: &str) -> Result<()> {
        sqlx::query(
            "UPDATE deployments
             SET lease_expires_at = now() - interval '1 second', lease_key = NULL, updated_at = now()
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn deployment(&self, id: Uuid) -> Result<Option<Deployment>> {
        Ok(sqlx::query_as("SELECT * FROM deployments WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub async fn recent_deployments(&self, limit: i64) -> Result<Vec<Deployment>> {
        Ok(
            sqlx::query_as("SELECT * FROM deployments ORDER BY created_at DESC LIMIT $1")
                .bind(limit)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    pub async fn app_deployments(&self, app: &str, limit: i64) -> Result<Vec<Deployment>> {
        app_deployments_in(&self.pool, app, limit).await
    }

    /// A page of the app's history older than `before` (keyset on `(created_at, id)`, read
    /// through `deployments_app_recent`).
    pub(crate) async fn app_deployments_before(
        &self,
        app: &str,
        before: (DateTime<Utc>, Uuid),
        limit: i64,
    ) -> Result<Vec<Deployment>> {
        Ok(sqlx::query_as(
            "SELECT * FROM deployments WHERE app = $1 AND (created_at, id) < ($2, $3)
             ORDER BY created_at DESC, id DESC LIMIT $4",
        )
        .bind(app)
        .bind(before.0)
        .bind(before.1)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// What serves `app` on `target`.
    pub(crate) async fn generation(&self, app: &str, target: &str) -> Result<Option<Generation>> {
        Ok(
            sqlx::query_as("SELECT * FROM app_generations WHERE app = $1 AND target = $2")
                .bind(app)
                .bind(target)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    pub(crate) async fn generations(&self) -> Result<Vec<Generation>> {
        Ok(
            sqlx::query_as("SELECT * FROM app_generations ORDER BY app, target")
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

impl Store {
    /// The tag the app's serving generation resolved (else its newest succeeded deployment
    /// that named one): what a manual redeploy of a glob or range app resolves again.
    pub(crate) async fn serving_tag(&self, app: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT d.requested_tag FROM deployments d
             LEFT JOIN app_generations g ON g.deployment_id = d.id
             WHERE d.app = $1 AND d.requested_tag IS NOT NULL AND d.state = 'succeeded'
             ORDER BY (g.app IS NOT NULL) DESC, d.finished_at DESC
             LIMIT 1",
        )
        .bind(app)
        .fetch_optional(&self.pool)
        .await?)
    }
}

/// Where a digest stands for an app, as the poller needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestStatus {
    /// The app's generation runs it.
    Serving,
    /// A queued or running deployment is for it, or for a digest not resolved yet (a push
    /// without a digest): wait for that one before judging.
    Pending,
    /// A deployment of it failed: re-queueing it would fail again at every poll.
    Failed,
    New,
}

impl Store {
    pub(crate) async fn digest_status(&self, app: &str, digest: &str) -> Result<DigestStatus> {
        let (serving, pending, failed): (bool, bool, bool) = sqlx::query_as(
            "SELECT
               EXISTS (SELECT 1 FROM app_generations WHERE app = $1 AND digest = $2),
               EXISTS (SELECT 1 FROM deployments
                       WHERE app = $1 AND state IN ('queued', 'running')
                         AND (claimed_digest = $2 OR resolved_digest = $2
                              OR (claimed_digest IS NULL AND resolved_digest IS NULL))),
               EXISTS (SELECT 1 FROM deployments
                       WHERE app = $1 AND state = 'failed' AND resolved_digest = $2)",
        )
        .bind(app)
        .bind(digest)
        .fetch_one(&self.pool)
        .await?;
        Ok(if serving {
            DigestStatus::Serving
        } else if pending {
            DigestStatus::Pending
        } else if failed {
            DigestStatus::Failed
        } else {
            DigestStatus::New
        })
    }
}

/// How often an idle worker looks for a holder that died while another process's
/// deployment runs. Only while something runs: with nothing running, idle workers send no
/// query until the next sweep or NOTIFY.
pub const TAKEOVER_CHECK: Duration = Duration::from_secs(1);

impl Store {
    /// When an idle worker should look at the queue again by itself (NOTIFY wakes it
    /// sooner): `None` when nothing runs anywhere; otherwise when the earliest lease
    /// expires, or [`TAKEOVER_CHECK`] when a deployment runs under another process, whose
    /// death must be noticed within a second or two.
    pub async fn next_wakeup(&self, liveness_key: i64) -> Result<Option<Duration>> {
        // One statement: the running ones' leases, and the earliest moment a
        // waiting deployment may run or expire, which is the one timer a wait needs.
        // A wait whose app has a deployment running is not claimable until that one ends,
        // and its end wakes the workers (NOTIFY): counting it here would spin them.
        let row: (Option<f64>, Option<bool>, Option<f64>) = sqlx::query_as(
            "WITH r AS (SELECT app, lease_expires_at, lease_key FROM deployments
                        WHERE state = 'running')
             SELECT (SELECT EXTRACT(EPOCH FROM (min(lease_expires_at) - now()))::float8 FROM r),
                    (SELECT bool_or(lease_key IS DISTINCT FROM $1) FROM r),
                    (SELECT EXTRACT(EPOCH FROM (min(w.waiting_until) - now()))::float8
                     FROM deployments w
                     WHERE w.state IN ('awaiting_approval', 'awaiting_window')
                       AND w.app NOT IN (SELECT app FROM r))",
        )
        .bind(liveness_key)
        .fetch_one(&self.pool)
        .await?;
        let leases = wakeup_from(row.0, row.1.unwrap_or(false));
        let waits = row
            .2
            .map(|s| Duration::from_secs_f64(s.clamp(0.0, 86_400.0)));
        Ok(match (leases, waits) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// `None` when nothing runs (`min` over no rows is NULL: never read it as "now").
fn wakeup_from(lease_left_secs: Option<f64>, others_running: bool) -> Option<Duration> {
    let left = lease_left_secs?;
    let lease = Duration::from_secs_f64(left.clamp(0.0, 86_400.0));
    Some(if others_running {
        lease.min(TAKEOVER_CHECK)
    } else {
        lease
    })
}

/// The app's newest deployments, on a pool or inside a snapshot (`snapshot.rs`).
pub(super) async fn app_deployments_in<'c>(
    ex: impl sqlx::PgExecutor<'c>,
    app: &str,
    limit: i64,
) -> Result<Vec<Deployment>> {
    Ok(
        sqlx::query_as(
            "SELECT * FROM deployments WHERE app = $1 ORDER BY created_at DESC LIMIT $2",
        )
        .bind(app)
        .bind(limit)
        .fetch_all(ex)
        .await?,
    )
}

/// What serves the app on each of its engines, on a pool or inside a snapshot.
pub(super) async fn generations_of_in<'c>(
    ex: impl sqlx::PgExecutor<'c>,
    app: &str,
) -> Result<Vec<Generation>> {
    Ok(
        sqlx::query_as("SELECT * FROM app_generations WHERE app = $1 ORDER BY target")
            .bind(app)
            .fetch_all(ex)
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_running_means_no_wakeup_at_all() {
        assert_eq!(wakeup_from(None, false), None);
        assert_eq!(wakeup_from(None, true), None);
    }

    #[test]
    fn another_process_deploying_is_checked_every_second_and_an_expired_lease_at_once() {
        assert_eq!(wakeup_from(Some(25.0), true), Some(TAKEOVER_CHECK));
        assert_eq!(
            wakeup_from(Some(25.0), false),
            Some(Duration::from_secs(25))
        );
        assert_eq!(wakeup_from(Some(-3.0), false), Some(Duration::ZERO));
    }
}
