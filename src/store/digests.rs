//! Digests in the outbox, and what one says: per app, the deployments that ended in the
//! period, what serves now, what waits for approval. One insert per endpoint and period
//! wins (migration 0030's unique index), however many Pier processes fire the same timer.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Result, Store};

/// One app's part of a digest.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, serde::Deserialize)]
pub struct DigestApp {
    pub app: String,
    pub succeeded: i64,
    pub failed: i64,
    pub rolled_back: i64,
    pub cancelled: i64,
    /// The digest of its newest succeeded deployment: what serves, unless it was stopped.
    pub serving: Option<String>,
    /// Deployments waiting for approval now.
    pub pending_approvals: i64,
}

impl Store {
    /// What happened to `apps` from `from` to `to`, one row per app, by name.
    pub(crate) async fn digest_summary(
        &self,
        apps: &[String],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<DigestApp>> {
        Ok(sqlx::query_as(
            "SELECT a.app,
                    count(d.id) FILTER (WHERE d.state = 'succeeded') AS succeeded,
                    count(d.id) FILTER (WHERE d.state = 'failed') AS failed,
                    count(d.id) FILTER (WHERE d.state = 'rolled_back') AS rolled_back,
                    count(d.id) FILTER (WHERE d.state = 'cancelled') AS cancelled,
                    (SELECT s.resolved_digest FROM deployments s
                     WHERE s.app = a.app AND s.state = 'succeeded'
                     ORDER BY s.finished_at DESC NULLS LAST LIMIT 1) AS serving,
                    (SELECT count(*) FROM deployments w
                     WHERE w.app = a.app AND w.state = 'awaiting_approval') AS pending_approvals
             FROM unnest($1::text[]) AS a(app)
             LEFT JOIN deployments d
               ON d.app = a.app AND d.finished_at >= $2 AND d.finished_at < $3
             GROUP BY a.app ORDER BY a.app",
        )
        .bind(apps)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Puts the digest of `period` for `endpoint` in the outbox unless one is there
    /// already; whether this call inserted it.
    pub(crate) async fn insert_digest(
        &self,
        endpoint: &str,
        period: &str,
        payload: &serde_json::Value,
    ) -> Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO notifications (id, endpoint, event, app, deployment_id, period, payload)
             VALUES ($1, $2, 'digest', '', NULL, $3, $4)
             ON CONFLICT (endpoint, period) WHERE period IS NOT NULL DO NOTHING",
        )
        .bind(Uuid::new_v4())
        .bind(endpoint)
        .bind(period)
        .bind(payload)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Whether the digest of `period` for `endpoint` is in the outbox already: the timer
    /// asks before it summarizes, so a period is summarized once, not by every process.
    pub(crate) async fn digest_exists(&self, endpoint: &str, period: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM notifications WHERE endpoint = $1 AND period = $2)",
        )
        .bind(endpoint)
        .bind(period)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Records one use of an approval link; `false` when it was used before (by anyone).
    pub(crate) async fn use_approval_link(
        &self,
        nonce: Uuid,
        action: &str,
        deployment: Uuid,
        by: &str,
    ) -> Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO approval_link_uses (nonce, action, deployment_id, used_by)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(nonce)
        .bind(action)
        .bind(deployment)
        .bind(by)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }
}
