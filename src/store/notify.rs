//! The notifications outbox: endpoints synced from the config, due rows claimed with SKIP
//! LOCKED, every attempt logged.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::text::pg_opt;
use super::{Result, Store};

/// An endpoint as the outbox trigger reads it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub name: String,
    pub apps: Option<Vec<String>>,
    pub events: Vec<String>,
}

/// A notification claimed for one attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueNotification {
    pub id: Uuid,
    pub endpoint: String,
    pub event: String,
    pub app: String,
    /// `None` for a digest.
    pub deployment_id: Option<Uuid>,
    pub payload: serde_json::Value,
    /// This attempt's number, from 1.
    pub attempts: i32,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct NotificationRow {
    pub id: Uuid,
    pub endpoint: String,
    pub event: String,
    pub app: String,
    /// `None` for a digest, which names its `period` instead.
    pub deployment_id: Option<Uuid>,
    pub period: Option<String>,
    pub state: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct AttemptRow {
    pub notification_id: Uuid,
    pub attempt: i32,
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<i32>,
    pub error: Option<String>,
    pub took_ms: i32,
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl Store {
    /// Makes the endpoints table say what the config says, in one transaction.
    pub(crate) async fn sync_endpoints(&self, endpoints: &[Endpoint]) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM notification_endpoints")
            .execute(&mut *tx)
            .await?;
        for e in endpoints {
            sqlx::query(
                "INSERT INTO notification_endpoints (name, apps, events) VALUES ($1, $2, $3)",
            )
            .bind(&e.name)
            .bind(&e.apps)
            .bind(&e.events)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Claims up to `limit` due notifications of the given endpoints for one attempt each:
    /// their next attempt is moved `hold` ahead, so that another process does not send
    /// them meanwhile, and a sender that dies mid-send leaves them due again after it.
    pub(crate) async fn claim_notifications(
        &self,
        endpoints: &[String],
        hold: Duration,
        limit: i64,
    ) -> Result<Vec<DueNotification>> {
        Ok(sqlx::query_as(
            "WITH due AS (
               SELECT id FROM notifications
               WHERE state = 'pending' AND next_attempt_at <= now() AND endpoint = ANY($1)
               ORDER BY next_attempt_at LIMIT $3
               FOR UPDATE SKIP LOCKED)
             UPDATE notifications n
             SET attempts = n.attempts + 1,
                 next_attempt_at = now() + $2 * interval '1 millisecond'
             FROM due WHERE n.id = due.id
             RETURNING n.id, n.endpoint, n.event, n.app, n.deployment_id, n.payload, n.attempts",
        )
        .bind(endpoints)
        .bind(millis(hold))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Logs one attempt and moves the notification on: `sent`, due again after `retry_in`,
    /// or `failed` for good (`retry_in` is `None` and it was not sent).
    pub(crate) async fn record_attempt(
        &self,
        n: &DueNotification,
        status: Option<u16>,
        error: Option<&str>,
        took: Duration,
        sent: bool,
        retry_in: Option<Duration>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO notification_attempts (notification_id, attempt, status, error, took_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(n.id)
        .bind(n.attempts)
        .bind(status.map(i32::from))
        .bind(pg_opt(error))
        .bind(millis(took).min(i32::MAX as i64) as i32)
        .execute(&mut *tx)
        .await?;
        let state = match (sent, retry_in) {
            (true, _) => "sent",
            (false, Some(_)) => "pending",
            (false, None) => "failed",
        };
        sqlx::query(
            "UPDATE notifications
             SET state = $2, last_error = $3,
                 next_attempt_at = now() + $4 * interval '1 millisecond',
                 finished_at = CASE WHEN $2 = 'pending' THEN NULL ELSE now() END
             WHERE id = $1",
        )
        .bind(n.id)
        .bind(state)
        .bind(pg_opt(error))
        .bind(millis(retry_in.unwrap_or_default()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// How long until the earliest pending notification of these endpoints is due; `None`
    /// when none is pending (then the sender sleeps until a NOTIFY).
    pub(crate) async fn next_notification_due(
        &self,
        endpoints: &[String],
    ) -> Result<Option<Duration>> {
        let secs: Option<f64> = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM (min(next_attempt_at) - now()))::float8
             FROM notifications WHERE state = 'pending' AND endpoint = ANY($1)",
        )
        .bind(endpoints)
        .fetch_one(&self.pool)
        .await?;
        Ok(secs.map(|s| Duration::from_secs_f64(s.clamp(0.0, 86_400.0))))
    }

    /// The newest notifications with every attempt of each, for the API and the pages;
    /// `deployment` narrows to one. Both are read in one snapshot: read apart, a send that
    /// commits between them shows an attempt logged with status 200 on a row still `pending`.
    pub(crate) async fn notification_log(
        &self,
        deployment: Option<Uuid>,
        limit: i64,
    ) -> Result<(Vec<NotificationRow>, Vec<AttemptRow>)> {
        let mut tx = self.begin_snapshot().await?;
        let rows: Vec<NotificationRow> = sqlx::query_as(
            "SELECT id, endpoint, event, app, deployment_id, period, state, attempts, next_attempt_at,
                    last_error, created_at, finished_at
             FROM notifications WHERE ($1::uuid IS NULL OR deployment_id = $1)
             ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(deployment)
        .bind(limit.clamp(1, 200))
        .fetch_all(&mut *tx)
        .await?;
        let ids: Vec<Uuid> = rows.iter().map(|n| n.id).collect();
        let attempts = sqlx::query_as(
            "SELECT notification_id, attempt, at, status, error, took_ms
             FROM notification_attempts WHERE notification_id = ANY($1)
             ORDER BY notification_id, attempt, id",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((rows, attempts))
    }
}
