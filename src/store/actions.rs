//! Operator actions' SQL: pins (with their history), rollback choices, cancel and stop.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::deployments::{Enqueued, NewDeployment, enqueue_as, lock_app};
use super::kinds::DeploymentState;
use super::text::pg_text;
use super::{Result, Store};

/// The pin in force for an app: pushes and the poller do not move it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize, Deserialize)]
pub struct Pin {
    pub app: String,
    pub digest: String,
    /// Who pinned it (see `actions::Actor::describe`).
    pub by: String,
    pub at: DateTime<Utc>,
    /// The rollback deployment that set it.
    pub deployment_id: Option<Uuid>,
}

/// An earlier digest that deployed successfully: a rollback choice.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct SucceededDigest {
    pub digest: String,
    /// The tag it was resolved from, when one was.
    pub tag: Option<String>,
    /// Its latest succeeded deployment.
    pub deployment_id: Uuid,
    pub finished_at: Option<DateTime<Utc>>,
}

/// What a cancel request did to the deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was queued: it is cancelled now and never runs.
    Cancelled {
        app: String,
    },
    /// It runs: the stop is recorded and honoured at its next step boundary.
    StopRequested,
    /// It had already ended in this state.
    AlreadyFinal(DeploymentState),
    NotFound,
}

const PIN_SELECT: &str = "SELECT app, digest, pinned_by AS by, pinned_at AS at, deployment_id
     FROM pins WHERE app = $1 AND unpinned_at IS NULL";

impl Store {
    pub async fn pin(&self, app: &str) -> Result<Option<Pin>> {
        Ok(sqlx::query_as(PIN_SELECT)
            .bind(app)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Whether `digest` ever deployed successfully for `app` (and only for it).
    pub(crate) async fn succeeded_for(&self, app: &str, digest: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM deployments
                            WHERE app = $1 AND resolved_digest = $2 AND state = 'succeeded')",
        )
        .bind(app)
        .bind(digest)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The app's digests that deployed successfully, newest success first: the rollback
    /// choices (the serving one among them).
    pub(crate) async fn succeeded_digests(
        &self,
        app: &str,
        limit: i64,
    ) -> Result<Vec<SucceededDigest>> {
        Ok(sqlx::query_as(
            "SELECT * FROM (
               SELECT DISTINCT ON (resolved_digest)
                      resolved_digest AS digest, requested_tag AS tag, id AS deployment_id,
                      finished_at
               FROM deployments
               WHERE app = $1 AND state = 'succeeded' AND resolved_digest IS NOT NULL
               ORDER BY resolved_digest, finished_at DESC) latest
             ORDER BY finished_at DESC LIMIT $2",
        )
        .bind(app)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Pins `app` to the deployment's digest and queues it, in one transaction under the
    /// app's enqueue lock: no push can slip between the pin and the rollback's queueing
    /// and supersede it. A pin already in force is replaced (its row keeps who set it).
    pub async fn pin_and_enqueue(&self, d: NewDeployment, by: &str) -> Result<(Enqueued, Pin)> {
        let digest = d.claimed_digest.clone().unwrap_or_default();
        let app = d.app.clone();
        let mut tx = self.begin().await?;
        lock_app(&mut tx, &app).await?;
        let enqueued = enqueue_as(&mut tx, d, Some(by)).await?;
        let id = match &enqueued {
            Enqueued::Queued { id, .. } | Enqueued::AlreadyPending { id, .. } => *id,
        };
        sqlx::query(
            "UPDATE pins SET unpinned_by = $2, unpinned_at = now()
             WHERE app = $1 AND unpinned_at IS NULL",
        )
        .bind(&app)
        .bind(pg_text(by))
        .execute(&mut *tx)
        .await?;
        let pin: Pin = sqlx::query_as(
            "INSERT INTO pins (app, digest, pinned_by, deployment_id) VALUES ($1, $2, $3, $4)
             RETURNING app, digest, pinned_by AS by, pinned_at AS at, deployment_id",
        )
        .bind(&app)
        .bind(&digest)
        .bind(pg_text(by))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((enqueued, pin))
    }

    /// Ends the pin in force, recording who ended it; `None` when the app was not pinned.
    pub async fn unpin(&self, app: &str, by: &str) -> Result<Option<Pin>> {
        let mut tx = self.begin().await?;
        lock_app(&mut tx, app).await?;
        let pin: Option<Pin> = sqlx::query_as(
            "UPDATE pins SET unpinned_by = $2, unpinned_at = now()
             WHERE app = $1 AND unpinned_at IS NULL
             RETURNING app, digest, pinned_by AS by, pinned_at AS at, deployment_id",
        )
        .bind(app)
        .bind(pg_text(by))
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(pin)
    }

    /// Queues a deployment asked for by hand, recording who asked.
    pub(crate) async fn enqueue_by(&self, d: NewDeployment, by: &str) -> Result<Enqueued> {
        let mut tx = self.begin().await?;
        let out = enqueue_as(&mut tx, d, Some(by)).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Cancels a queued deployment at once, or records a stop for a running one (the
    /// worker honours it at its next step boundary). Row-locked, so a worker claiming the
    /// deployment at this moment either sees it cancelled or runs with the stop recorded.
    pub(crate) async fn cancel(&self, id: Uuid, by: &str) -> Result<CancelOutcome> {
        let mut tx = self.begin().await?;
        let row: Option<(DeploymentState, String)> =
            sqlx::query_as("SELECT state, app FROM deployments WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let out = match row {
            None => CancelOutcome::NotFound,
            Some((
                DeploymentState::Queued
                | DeploymentState::AwaitingApproval
                | DeploymentState::AwaitingWindow,
                app,
            )) => {
                sqlx::query(
                    "UPDATE deployments
                     SET state = 'cancelled', outcome = 'cancelled by ' || $2 || ' before it started',
                         cancel_requested_by = $2, cancel_requested_at = now(),
                         finished_at = now(), updated_at = now()
                     WHERE id = $1",
                )
                .bind(id)
                .bind(pg_text(by))
                .execute(&mut *tx)
                .await?;
                CancelOutcome::Cancelled { app }
            }
            Some((DeploymentState::Running, _)) => {
                // The first request stands: asking again does not move its time.
                sqlx::query(
                    "UPDATE deployments
                     SET cancel_requested_by = coalesce(cancel_requested_by, $2),
                         cancel_requested_at = coalesce(cancel_requested_at, now()),
                         updated_at = now()
                     WHERE id = $1",
                )
                .bind(id)
                .bind(pg_text(by))
                .execute(&mut *tx)
                .await?;
                // The run may be waiting (a rollout's pause): wake it, at commit.
                sqlx::query("SELECT pg_notify('pier_live', $1::text)")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                CancelOutcome::StopRequested
            }
            Some((other, _)) => CancelOutcome::AlreadyFinal(other),
        };
        tx.commit().await?;
        Ok(out)
    }

    /// Who asked to stop this running deployment, if anyone: what the pipeline checks at
    /// each step boundary.
    pub(crate) async fn stop_requested(&self, id: Uuid) -> Result<Option<String>> {
        Ok(sqlx::query_scalar::<_, Option<String>>(
            "SELECT cancel_requested_by FROM deployments WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .flatten())
    }
}

/// Most requests waiting for a deployment at once, each on a listening connection of its
/// own; beyond it a waiter gets the deployment as it is now and asks again.
const MAX_WAITERS: usize = 16;
static WAITERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_WAITERS);

impl Store {
    /// The deployment once it is final, or as it is when `within` has passed (`None`: no
    /// such deployment). Woken by the queue's NOTIFY, which the `deployments` trigger sends
    /// at the commit of every state change from any process; the row is read again only
    /// when its app's channel message arrives. No polling: an idle wait sends nothing.
    pub(crate) async fn wait_final(
        &self,
        id: Uuid,
        within: std::time::Duration,
    ) -> Result<Option<super::Deployment>> {
        let Some(now) = self.deployment(id).await? else {
            return Ok(None);
        };
        if now.state.is_final() || within.is_zero() {
            return Ok(Some(now));
        }
        let Ok(_permit) = WAITERS.try_acquire() else {
            return Ok(Some(now));
        };
        let deadline = tokio::time::Instant::now() + within;
        let mut listener = self.own_listener(super::Channel::Queue).await?;
        // Read again once listening: a change committed before the LISTEN is not lost.
        loop {
            let Some(d) = self.deployment(id).await? else {
                return Ok(None);
            };
            if d.state.is_final() {
                return Ok(Some(d));
            }
            loop {
                match tokio::time::timeout_at(deadline, listener.try_recv()).await {
                    Err(_) => return Ok(Some(d)),
                    Ok(Ok(Some(n))) if n.payload() != d.app => continue,
                    // Its app changed: read the row again.
                    Ok(Ok(Some(_))) => break,
                    // The connection dropped (a restart, a failover): NOTIFYs may have been
                    // missed, so listen again, on the host usable now, then read the row.
                    Ok(Ok(None)) => {
                        listener = self.listen_again(deadline).await?;
                        break;
                    }
                    Ok(Err(e)) => return Err(e.into()),
                }
            }
        }
    }
}

impl Store {
    /// A new queue listener for a waiter whose connection dropped, tried with backoff until
    /// `deadline` (then the database counts as unavailable).
    async fn listen_again(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<sqlx::postgres::PgListener> {
        let mut backoff = crate::backoff::Backoff::new(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_secs(1),
        );
        loop {
            match self.own_listener(super::Channel::Queue).await {
                Ok(l) => return Ok(l),
                Err(e) => {
                    let e = super::StoreError::from(e);
                    let Some(pause) = backoff.next_delay() else {
                        return Err(e);
                    };
                    if !e.is_unavailable() || tokio::time::Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

impl Store {
    /// Deployments waiting and running now, all apps together.
    pub(crate) async fn queue_depth(&self) -> Result<[(&'static str, i64); 2]> {
        let (queued, running): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE state = 'queued'),
                    count(*) FILTER (WHERE state = 'running')
             FROM deployments WHERE state IN ('queued', 'running')",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok([("queued", queued), ("running", running)])
    }
}
