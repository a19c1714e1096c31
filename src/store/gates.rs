//! The gates' SQL: holding a claimed deployment in `awaiting_approval` or `awaiting_window`,
//! the decisions of named admins (approve, reject, override), and freezes.
//!
//! Every transition takes the deployment's row lock, so an approval arriving while a worker
//! holds the deployment is never lost: either the hold sees it, or the approval sees the
//! deployment waiting and releases it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::deployments::lock_app;
use super::kinds::DeploymentState;
use super::text::{pg_opt, pg_text};
use super::{Result, Store, StoreError};

/// An approval, rejection or override, as recorded.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Decision {
    pub kind: String,
    pub admin: String,
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

/// What an approval gate found for a claimed deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalGate {
    /// Enough distinct admins approved it.
    Approved(Vec<String>),
    /// It waits now (its lease is given up), with the approvals it has.
    Held(Vec<String>),
    /// Its request expired before enough approvals came: the caller cancels it.
    Expired(Vec<String>),
}

/// What a decision of an admin did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Decided {
    /// Recorded; `approvals` are the distinct counting approvals so far, and `released`
    /// says whether the deployment went back to the queue (or was superseded there).
    Approved {
        approvals: Vec<String>,
        released: bool,
        /// This admin had approved it already: counted once.
        again: bool,
    },
    Rejected,
    Overridden,
    /// It is not in the state this decision is for (`awaiting_approval` for approve and
    /// reject, `awaiting_window` for override).
    NotWaiting(DeploymentState),
    NotFound,
}

/// The row of a deployment this worker holds, locked, with its approval request's expiry;
/// `LeaseLost` when it holds it no more.
async fn lock_held(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
    owner: &str,
) -> Result<(String, Option<DateTime<Utc>>)> {
    sqlx::query_as(
        "SELECT app, approval_expires_at FROM deployments
         WHERE id = $1 AND lease_owner = $2 AND state = 'running' FOR UPDATE",
    )
    .bind(id)
    .bind(owner)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(StoreError::LeaseLost)
}

async fn approvals_in(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
    from: &[String],
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT admin FROM deployment_decisions
         WHERE deployment_id = $1 AND kind = 'approve' AND admin = ANY ($2) ORDER BY at",
    )
    .bind(id)
    .bind(from)
    .fetch_all(&mut **tx)
    .await?)
}

/// Puts the running deployment back as waiting, its lease and attempt given back (a wait
/// is not a try), and supersedes older deployments of the app that wait: the newest
/// pushed digest is the one that waits.
async fn hold_in(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
    app: &str,
    state: DeploymentState,
    why: &str,
    until: DateTime<Utc>,
) -> Result<()> {
    debug_assert!(state.is_waiting());
    sqlx::query(
        "UPDATE deployments
         SET state = $2, waiting_for = $3, waiting_until = $4, attempt = greatest(attempt - 1, 0),
             started_at = NULL, lease_owner = NULL, lease_key = NULL, lease_expires_at = NULL,
             updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(pg_text(why))
    .bind(until)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE deployments o
         SET state = 'superseded', superseded_by = $1, finished_at = now(), updated_at = now(),
             outcome = 'superseded by a newer deployment while it waited'
         FROM deployments n
         WHERE n.id = $1 AND o.app = $2 AND o.id <> $1
           AND o.state IN ('awaiting_approval', 'awaiting_window')
           AND o.created_at < n.created_at",
    )
    .bind(id)
    .bind(app)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A waiting deployment may run: back to the queue, or superseded by the deployment that
/// was queued for its app meanwhile (which is always the newer one).
async fn release_in(tx: &mut Transaction<'_, Postgres>, id: Uuid, app: &str) -> Result<()> {
    lock_app(tx, app).await?;
    let queued: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM deployments WHERE app = $1 AND state = 'queued' AND id <> $2",
    )
    .bind(app)
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    let q = match queued {
        Some(_) => {
            "UPDATE deployments SET state = 'superseded', superseded_by = $2, finished_at = now(),
                 updated_at = now(), outcome = 'superseded by a newer deployment while it waited'
             WHERE id = $1"
        }
        None => {
            "UPDATE deployments SET state = 'queued', waiting_for = NULL, waiting_until = NULL,
                 updated_at = now()
             WHERE id = $1"
        }
    };
    let mut query = sqlx::query(q).bind(id);
    if let Some(newer) = queued {
        query = query.bind(newer);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

impl Store {
    /// The approval gate of a deployment this worker claimed: approved, held (in
    /// `awaiting_approval` until `expires` from its first hold), or expired.
    pub(crate) async fn approval_gate(
        &self,
        id: Uuid,
        owner: &str,
        required: usize,
        from: &[String],
        expires: std::time::Duration,
    ) -> Result<ApprovalGate> {
        let mut tx = self.begin().await?;
        let (app, until) = lock_held(&mut tx, id, owner).await?;
        let approvals = approvals_in(&mut tx, id, from).await?;
        if approvals.len() >= required {
            return Ok(ApprovalGate::Approved(approvals));
        }
        let now = Utc::now();
        if until.is_some_and(|u| u <= now) {
            return Ok(ApprovalGate::Expired(approvals));
        }
        let until = until.unwrap_or_else(|| {
            now + chrono::Duration::from_std(expires).unwrap_or(chrono::Duration::days(1))
        });
        let why = format!(
            "{} approval(s) of {}; has {}",
            required,
            from.join(", "),
            if approvals.is_empty() {
                "none".to_owned()
            } else {
                approvals.join(", ")
            }
        );
        sqlx::query("UPDATE deployments SET approval_expires_at = $2 WHERE id = $1")
            .bind(id)
            .bind(until)
            .execute(&mut *tx)
            .await?;
        hold_in(
            &mut tx,
            id,
            &app,
            DeploymentState::AwaitingApproval,
            &why,
            until,
        )
        .await?;
        tx.commit().await?;
        Ok(ApprovalGate::Held(approvals))
    }

    /// Holds a claimed deployment in `awaiting_window` until `until`, saying why.
    pub(crate) async fn hold_for_window(
        &self,
        id: Uuid,
        owner: &str,
        why: &str,
        until: DateTime<Utc>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let (app, _) = lock_held(&mut tx, id, owner).await?;
        hold_in(
            &mut tx,
            id,
            &app,
            DeploymentState::AwaitingWindow,
            why,
            until,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records that the claimed deployment passed its gates: from here on it runs, and a
    /// resumed run is never held.
    pub(crate) async fn pass_gates(&self, id: Uuid, owner: &str) -> Result<()> {
        let n = sqlx::query(
            "UPDATE deployments SET gated_at = now(), waiting_for = NULL, waiting_until = NULL
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::LeaseLost)
        }
    }

    /// The override recorded for this deployment, if any.
    pub(crate) async fn override_of(&self, id: Uuid) -> Result<Option<Decision>> {
        Ok(sqlx::query_as(
            "SELECT kind, admin, reason, at FROM deployment_decisions
             WHERE deployment_id = $1 AND kind = 'override' ORDER BY at LIMIT 1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every decision on a deployment, oldest first (the timeline shows them).
    pub(crate) async fn decisions(&self, id: Uuid) -> Result<Vec<Decision>> {
        Ok(sqlx::query_as(
            "SELECT kind, admin, reason, at FROM deployment_decisions
             WHERE deployment_id = $1 ORDER BY at, id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// The deployment's state and app, row-locked for a decision.
async fn lock_for_decision(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
) -> Result<Option<(DeploymentState, String)>> {
    Ok(
        sqlx::query_as("SELECT state, app FROM deployments WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?,
    )
}

async fn record(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
    kind: &str,
    admin: &str,
    reason: Option<&str>,
) -> Result<bool> {
    let n = sqlx::query(
        "INSERT INTO deployment_decisions (deployment_id, kind, admin, reason)
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(kind)
    .bind(pg_text(admin))
    .bind(pg_opt(reason))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(n == 1)
}

impl Store {
    /// `admin` approves a deployment waiting for approval; once `required` distinct
    /// admins of `from` have, it goes back to the queue.
    pub(crate) async fn approve(
        &self,
        id: Uuid,
        admin: &str,
        required: usize,
        from: &[String],
    ) -> Result<Decided> {
        let mut tx = self.begin().await?;
        let app = match lock_for_decision(&mut tx, id).await? {
            None => return Ok(Decided::NotFound),
            Some((DeploymentState::AwaitingApproval, app)) => app,
            Some((other, _)) => return Ok(Decided::NotWaiting(other)),
        };
        let again = !record(&mut tx, id, "approve", admin, None).await?;
        let approvals = approvals_in(&mut tx, id, from).await?;
        let released = approvals.len() >= required;
        if released {
            release_in(&mut tx, id, &app).await?;
        } else {
            sqlx::query(
                "UPDATE deployments SET waiting_for = $2, updated_at = now() WHERE id = $1",
            )
            .bind(id)
            .bind(format!(
                "{required} approval(s) of {}; has {}",
                from.join(", "),
                approvals.join(", ")
            ))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Decided::Approved {
            approvals,
            released,
            again,
        })
    }

    /// `admin` rejects a deployment waiting for approval: it ends `cancelled`, saying who.
    pub(crate) async fn reject(
        &self,
        id: Uuid,
        admin: &str,
        reason: Option<&str>,
    ) -> Result<Decided> {
        let mut tx = self.begin().await?;
        match lock_for_decision(&mut tx, id).await? {
            None => return Ok(Decided::NotFound),
            Some((DeploymentState::AwaitingApproval, _)) => {}
            Some((other, _)) => return Ok(Decided::NotWaiting(other)),
        }
        record(&mut tx, id, "reject", admin, reason).await?;
        let outcome = match reason {
            Some(r) => format!("rejected by {admin}: {r}"),
            None => format!("rejected by {admin}"),
        };
        sqlx::query(
            "UPDATE deployments SET state = 'cancelled', outcome = $2, finished_at = now(),
                 updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(pg_text(&outcome))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Decided::Rejected)
    }

    /// `admin` lets a deployment waiting for its window (or a freeze) run now, for the
    /// recorded reason.
    pub(crate) async fn override_wait(
        &self,
        id: Uuid,
        admin: &str,
        reason: &str,
    ) -> Result<Decided> {
        let mut tx = self.begin().await?;
        let app = match lock_for_decision(&mut tx, id).await? {
            None => return Ok(Decided::NotFound),
            Some((DeploymentState::AwaitingWindow, app)) => app,
            Some((other, _)) => return Ok(Decided::NotWaiting(other)),
        };
        record(&mut tx, id, "override", admin, Some(reason)).await?;
        release_in(&mut tx, id, &app).await?;
        tx.commit().await?;
        Ok(Decided::Overridden)
    }
}
