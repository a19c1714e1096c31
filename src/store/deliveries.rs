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
}

impl Store {
    /// Stores a delivery and the deployments it asks for in ONE transaction: the sender is
    /// answered 2xx only after this commits, so a crash or outage never loses an accepted
    /// push, and a retry of the same event finds its first delivery.
    pub async fn record_delivery(
        &self,
        delivery: NewDelivery,
        wanted: Vec<NewDeployment>,
    ) -> Result<DeliveryOutcome> {
        let mut tx = self.begin().await?;
        let verdict = if wanted.is_empty() {
            Verdict::Ignored
        } else {
            Verdict::Queued
        };
        let row: (Uuid, bool) = sqlx::query_as(
            "INSERT INTO deliveries (id, source, event_key, verdict, reason, events)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (source, event_key) WHERE event_key IS NOT NULL
             DO UPDATE SET seen_count = deliveries.seen_count + 1, last_seen_at = now()
             RETURNING id, (xmax = 0) AS inserted",
        )
        .bind(Uuid::new_v4())
        .bind(pg_text(&delivery.source))
        .bind(pg_opt(delivery.event_key.as_deref()))
        .bind(verdict)
        .bind(pg_text(&delivery.reason))
        .bind(pg_json(&delivery.events).as_ref())
        .fetch_one(&mut *tx)
        .await?;
        let (delivery_id, inserted) = row;
        if !inserted {
            tx.commit().await?;
            return Ok(DeliveryOutcome::Duplicate { delivery_id });
        }
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
