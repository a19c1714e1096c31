//! Promotions: the digest an app (staging) has served healthily, queued for the
//! app that promotes from it, once, linked to the deployment that proved it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::deployments::{Enqueued, NewDeployment, enqueue_locked, lock_app};
use super::{Result, Store};

/// The source app's serving deployment: succeeded, not promoted to the target yet, and
/// its digest quarantined for neither app.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Proven {
    pub deployment_id: Uuid,
    pub digest: String,
    pub finished_at: DateTime<Utc>,
}

/// Read inside and outside the promoting transaction alike: the serving generation is
/// what proves a digest (a rollback or a newer deployment replaces it, a failed soak
/// switched back never did).
const PROVEN: &str = "SELECT d.id AS deployment_id, d.resolved_digest AS digest, d.finished_at
     FROM app_generations g JOIN deployments d ON d.id = g.deployment_id
     WHERE g.app = $1 AND d.state = 'succeeded' AND d.resolved_digest IS NOT NULL
       AND d.finished_at IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM deployments p WHERE p.app = $2 AND p.promoted_from = d.id)
       AND NOT EXISTS (SELECT 1 FROM quarantine q
                       WHERE q.digest = d.resolved_digest AND q.app IN ($1, $2))
     ORDER BY g.switched_at DESC LIMIT 1";

impl Store {
    pub(crate) async fn proven(&self, source: &str, target: &str) -> Result<Option<Proven>> {
        Ok(sqlx::query_as(PROVEN)
            .bind(source)
            .bind(target)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Whether `digest` is what serves `app` on every one of `targets` (the same rows the
    /// workers write at each switch).
    pub(crate) async fn serves_everywhere(
        &self,
        app: &str,
        targets: &[String],
        digest: &str,
    ) -> Result<bool> {
        let serving: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM app_generations
             WHERE app = $1 AND target = ANY ($2) AND digest = $3",
        )
        .bind(app)
        .bind(targets)
        .bind(digest)
        .fetch_one(&self.pool)
        .await?;
        Ok(usize::try_from(serving).is_ok_and(|n| n == targets.len()))
    }

    /// Queues the promotion of `source`'s proven deployment `from` to `d.app`, if it is
    /// still the one serving and has served for `after`, under the target's enqueue lock:
    /// however many Pier processes look at once, it is queued once. Promotions of other
    /// digests still waiting are superseded: the newer staging success wins.
    pub(crate) async fn promote(
        &self,
        source: &str,
        from: Uuid,
        after: std::time::Duration,
        d: NewDeployment,
    ) -> Result<Option<Enqueued>> {
        let target = d.app.clone();
        let mut tx = self.begin().await?;
        lock_app(&mut tx, &target).await?;
        let proven: Option<Proven> = sqlx::query_as(PROVEN)
            .bind(source)
            .bind(&target)
            .fetch_optional(&mut *tx)
            .await?;
        let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
        match proven {
            Some(p) if p.deployment_id == from && p.finished_at + after <= Utc::now() => {}
            _ => return Ok(None),
        }
        let enqueued = enqueue_locked(&mut tx, d, Some("promotion")).await?;
        if let Enqueued::Queued { id, .. } = &enqueued {
            sqlx::query("UPDATE deployments SET promoted_from = $2 WHERE id = $1")
                .bind(id)
                .bind(from)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE deployments
                 SET state = 'superseded', superseded_by = $1, finished_at = now(),
                     updated_at = now(),
                     outcome = 'superseded: a newer digest was proven before it ran'
                 WHERE app = $2 AND trigger = 'promotion' AND id <> $1
                   AND state IN ('awaiting_approval', 'awaiting_window')",
            )
            .bind(id)
            .bind(&target)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(enqueued))
    }
}
