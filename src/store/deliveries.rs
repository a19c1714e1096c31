use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::deployments::{Enqueued, NewDeployment, enqueue_in};
use super::kinds::Verdict;
use super::text::{pg_json, pg_opt, pg_text};
use super::{Result, Store};

#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub source: String,
    /// The sender's event id(s); `None` when the sender gives none (then no dedupe).
    pub event_key: Option<String>,
    pub events: serde_json::Value,
    /// Why nothing deploys, when nothing does.
    pub reason: String,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Delivery {
    pub id: Uuid,
    pub source: String,
    pub event_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub seen_count: i32,
    pub verdict: Verdict,
    pub reason: String,
    pub events: serde_json::Value,
}

#[derive(Debug)]
pub enum DeliveryOutcome {
    /// Stored for the first time, with what each requested deployment became.
    Recorded {
        delivery_id: Uuid,
        deployments: Vec<Enqueued>,
    },
    /// The same event was delivered before; nothing new is stored.
    Duplicate { delivery_id: Uuid },
    /// The same authentic body was accepted before under another delivery id; nothing new
    /// is stored.
    Replay { delivery_id: Uuid },
}

impl Store {
    /// Stores a delivery and the deployments it asks for in ONE transaction: the sender is
    /// answered 2xx only after this commits, so a crash or outage never loses an accepted
    /// push, and a retry of the same event finds its first delivery.
    ///
    /// With `body_sha256`, a body (by its hash) that this source already delivered is
    /// refused too: senders that sign only the body cannot tell a replay from a retry, so
    /// the body itself is the event's identity. A retry of the same event id is a
    /// `Duplicate`, the same body under another id a `Replay`; the unique indexes decide
    /// races between processes.
    pub async fn record_delivery(
        &self,
        delivery: NewDelivery,
        body_sha256: Option<&[u8]>,
        wanted: Vec<NewDeployment>,
    ) -> Result<DeliveryOutcome> {
        let mut tx = self.begin().await?;
        let verdict = if wanted.is_empty() {
            Verdict::Ignored
        } else {
            Verdict::Queued
        };
        let inserted: Option<Uuid> = sqlx::query_scalar(
            "INSERT INTO deliveries (id, source, event_key, verdict, reason, events, body_sha256)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT DO NOTHING
             RETURNING id",
        )
        .bind(Uuid::new_v4())
        .bind(pg_text(&delivery.source))
        .bind(pg_opt(delivery.event_key.as_deref()))
        .bind(verdict)
        .bind(pg_text(&delivery.reason))
        .bind(pg_json(&delivery.events).as_ref())
        .bind(body_sha256)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(delivery_id) = inserted else {
            let (delivery_id, same_event): (Uuid, bool) = sqlx::query_as(
                "UPDATE deliveries SET seen_count = seen_count + 1, last_seen_at = now()
                 WHERE id = (SELECT id FROM deliveries
                             WHERE source = $1
                               AND (event_key = $2 OR body_sha256 = $3)
                             ORDER BY (event_key IS NOT DISTINCT FROM $2) DESC
                             LIMIT 1)
                 RETURNING id, event_key IS NOT DISTINCT FROM $2",
            )
            .bind(pg_text(&delivery.source))
            .bind(pg_opt(delivery.event_key.as_deref()))
            .bind(body_sha256)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(if same_event && delivery.event_key.is_some() {
                DeliveryOutcome::Duplicate { delivery_id }
            } else {
                DeliveryOutcome::Replay { delivery_id }
            });
        };
        let mut deployments = Vec::with_capacity(wanted.len());
        for mut d in wanted {
            d.delivery_id = Some(delivery_id);
            deployments.push(enqueue_in(&mut tx, d).await?);
        }
        tx.commit().await?;
        Ok(DeliveryOutcome::Recorded {
            delivery_id,
            deployments,
        })
    }

    pub async fn recent_deliveries(&self, limit: i64) -> Result<Vec<Delivery>> {
        Ok(
            sqlx::query_as("SELECT * FROM deliveries ORDER BY received_at DESC LIMIT $1")
                .bind(limit)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The deployments the given deliveries created: `(delivery, deployment, app)`.
    pub async fn deployments_of_deliveries(
        &self,
        ids: &[Uuid],
    ) -> Result<Vec<(Uuid, Uuid, String)>> {
        Ok(sqlx::query_as(
            "SELECT delivery_id, id, app FROM deployments WHERE delivery_id = ANY($1)
             ORDER BY created_at",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn count_deliveries(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM deliveries")
            .fetch_one(&self.pool)
            .await?)
    }
}
