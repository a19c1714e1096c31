//! Freezes, with their history: while one is in force, every new deployment of
//! the app waits in `awaiting_window` until it ends or is lifted.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::deployments::lock_app;
use super::text::pg_text;
use super::{Result, Store};

/// A freeze: every new deployment of the app waits until it ends or is lifted.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Freeze {
    pub app: String,
    pub until: DateTime<Utc>,
    pub reason: String,
    pub frozen_by: String,
    pub frozen_at: DateTime<Utc>,
}

impl Store {
    /// Freezes `app` until `until` (a freeze in force is replaced): new deployments wait.
    pub(crate) async fn freeze(
        &self,
        app: &str,
        until: DateTime<Utc>,
        reason: &str,
        by: &str,
    ) -> Result<Freeze> {
        let mut tx = self.begin().await?;
        lock_app(&mut tx, app).await?;
        sqlx::query(
            "UPDATE freezes SET lifted_by = $2, lifted_at = now()
             WHERE app = $1 AND lifted_at IS NULL",
        )
        .bind(app)
        .bind(pg_text(by))
        .execute(&mut *tx)
        .await?;
        let f: Freeze = sqlx::query_as(
            "INSERT INTO freezes (app, until, reason, frozen_by) VALUES ($1, $2, $3, $4)
             RETURNING app, until, reason, frozen_by, frozen_at",
        )
        .bind(app)
        .bind(until)
        .bind(pg_text(reason))
        .bind(pg_text(by))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(f)
    }

    /// Lifts the app's freeze; what waited for it is looked at again at once (the workers
    /// are woken, and a window still closed holds it again).
    pub(crate) async fn unfreeze(&self, app: &str, by: &str) -> Result<Option<Freeze>> {
        let mut tx = self.begin().await?;
        lock_app(&mut tx, app).await?;
        let f: Option<Freeze> = sqlx::query_as(
            "UPDATE freezes SET lifted_by = $2, lifted_at = now()
             WHERE app = $1 AND lifted_at IS NULL
             RETURNING app, until, reason, frozen_by, frozen_at",
        )
        .bind(app)
        .bind(pg_text(by))
        .fetch_optional(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE deployments SET waiting_until = now(), updated_at = now()
             WHERE app = $1 AND state = 'awaiting_window'",
        )
        .bind(app)
        .execute(&mut *tx)
        .await?;
        sqlx::query("SELECT pg_notify('pier_queue', $1)")
            .bind(app)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(f)
    }

    /// The app's freeze in force now, if any.
    pub(crate) async fn freeze_of(&self, app: &str) -> Result<Option<Freeze>> {
        Ok(sqlx::query_as(
            "SELECT app, until, reason, frozen_by, frozen_at FROM freezes
             WHERE app = $1 AND lifted_at IS NULL AND until > now()",
        )
        .bind(app)
        .fetch_optional(&self.pool)
        .await?)
    }
}
