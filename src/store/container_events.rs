//! What a deployment's containers did after they started (`deployment_events`): an OOM
//! kill or a restart loop, found by the resource sampler. Each is recorded with its
//! notifications in one statement, so that a crash cannot keep one without the other,
//! and at most once per container and kind, however often it is seen.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::kinds::ContainerEventKind;
use super::{Result, Store};

/// An event as the sampler found it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewContainerEvent {
    pub deployment_id: Uuid,
    pub kind: ContainerEventKind,
    pub target: String,
    pub service: String,
    pub container_id: String,
    pub container_name: String,
    pub at: DateTime<Utc>,
    pub restarts: Option<i64>,
    pub memory_limit_bytes: Option<i64>,
}

/// An event as the deployment's page and API show it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct ContainerEvent {
    pub kind: ContainerEventKind,
    pub target: String,
    pub service: String,
    pub container_id: String,
    pub container_name: String,
    pub at: DateTime<Utc>,
    pub restarts: Option<i64>,
    pub memory_limit_bytes: Option<i64>,
}

impl ContainerEvent {
    /// The event in words, for the timeline and a chat notification.
    pub fn words(&self) -> String {
        match self.kind {
            ContainerEventKind::OomKilled => format!(
                "Container {} was killed for lack of memory{}",
                self.container_name,
                self.memory_limit_bytes
                    .map(|l| format!(" (limit {} MiB)", l / (1 << 20)))
                    .unwrap_or_default()
            ),
            ContainerEventKind::RestartLoop => format!(
                "Container {} is in a restart loop: restarted {} times",
                self.container_name,
                self.restarts.unwrap_or_default()
            ),
        }
    }
}

impl Store {
    /// Records `e` for its deployment, and a notification for every endpoint that wants
    /// its event, in one statement. `false` when it was recorded before (or the
    /// deployment is unknown): nothing is added then, and nobody is notified again.
    pub(crate) async fn record_container_event(&self, e: &NewContainerEvent) -> Result<bool> {
        let words = ContainerEvent {
            kind: e.kind,
            target: e.target.clone(),
            service: e.service.clone(),
            container_id: e.container_id.clone(),
            container_name: e.container_name.clone(),
            at: e.at,
            restarts: e.restarts,
            memory_limit_bytes: e.memory_limit_bytes,
        }
        .words();
        let (added,): (i64,) = sqlx::query_as(
            "WITH added AS (
               INSERT INTO deployment_events (deployment_id, kind, target, service,
                   container_id, container_name, at, restarts, memory_limit_bytes)
               SELECT d.id, $2, $3, $4, $5, $6, $7, $8, $9 FROM deployments d WHERE d.id = $1
               ON CONFLICT DO NOTHING
               RETURNING deployment_id),
             sent AS (
               INSERT INTO notifications (id, endpoint, event, app, deployment_id, payload)
               SELECT gen_random_uuid(), ep.name, $10, d.app, d.id,
                      jsonb_build_object(
                          'id', d.id, 'app', d.app, 'state', d.state, 'event', $2::text,
                          'image', d.image, 'tag', d.requested_tag, 'digest', d.resolved_digest,
                          'target', $3::text, 'service', $4::text, 'container', $6::text,
                          'at', $7::timestamptz, 'restarts', $8::bigint,
                          'memory_limit_bytes', $9::bigint,
                          'error', $11::text, 'finished_at', d.finished_at)
               FROM added JOIN deployments d ON d.id = added.deployment_id
               JOIN notification_endpoints ep
                 ON (ep.apps IS NULL OR d.app = ANY (ep.apps)) AND $10 = ANY (ep.events)
               ON CONFLICT DO NOTHING)
             -- `sent` runs whether or not it is read (as every writing WITH does).
             SELECT count(*) FROM added",
        )
        .bind(e.deployment_id)
        .bind(e.kind)
        .bind(&e.target)
        .bind(&e.service)
        .bind(&e.container_id)
        .bind(&e.container_name)
        .bind(e.at)
        .bind(e.restarts)
        .bind(e.memory_limit_bytes)
        .bind(e.kind.event_name())
        .bind(words)
        .fetch_one(&self.pool)
        .await?;
        Ok(added > 0)
    }

    /// The events of deployment `id`, oldest first.
    pub(crate) async fn container_events(&self, id: Uuid) -> Result<Vec<ContainerEvent>> {
        Ok(sqlx::query_as(
            "SELECT kind, target, service, container_id, container_name, at, restarts,
                    memory_limit_bytes
             FROM deployment_events WHERE deployment_id = $1 ORDER BY at, id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }
}
