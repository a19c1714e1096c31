//! Health probes on a remote engine's host (migration 0023): the pipeline asks, the
//! `pier proxy --target` of that host takes the request, probes, and writes the outcome.
//! Each side wakes the other with NOTIFY; neither polls.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::text::pg_text;
use super::{Result, Store, StoreError};

/// Where a request stands (the `state` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeState {
    Requested,
    Probing,
    Healthy,
    Failed,
    /// No proxy took it in time; the pipeline gave up on it.
    Lapsed,
}

impl ProbeState {
    fn as_str(self) -> &'static str {
        match self {
            ProbeState::Requested => "requested",
            ProbeState::Probing => "probing",
            ProbeState::Healthy => "healthy",
            ProbeState::Failed => "failed",
            ProbeState::Lapsed => "lapsed",
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProbeRequest {
    pub id: Uuid,
    pub deployment_id: Uuid,
    pub target: String,
    pub service: String,
    pub container_id: String,
    pub address: String,
    pub path: String,
    pub json: sqlx::types::Json<BTreeMap<String, String>>,
    pub timeout_ms: i64,
    pub requested_at: DateTime<Utc>,
    pub take_by: DateTime<Utc>,
    state: String,
    pub taken_by: Option<String>,
    pub taken_at: Option<DateTime<Utc>>,
    pub attempts: Option<i32>,
    pub elapsed_ms: Option<i64>,
    pub detail: Option<String>,
}

impl ProbeRequest {
    /// The state column as written by migration 0023's CHECK; anything else reads as
    /// failed, never as healthy.
    pub(crate) fn state(&self) -> ProbeState {
        [
            ProbeState::Requested,
            ProbeState::Probing,
            ProbeState::Healthy,
            ProbeState::Lapsed,
        ]
        .into_iter()
        .find(|s| s.as_str() == self.state)
        .unwrap_or(ProbeState::Failed)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}{}", self.address, self.path)
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1) as u64)
    }
}

/// What the health step asks for.
#[derive(Debug, Clone)]
pub struct NewProbe<'a> {
    pub deployment: Uuid,
    pub target: &'a str,
    pub service: &'a str,
    pub container: &'a str,
    pub address: &'a str,
    pub path: &'a str,
    pub json: &'a BTreeMap<String, String>,
    pub timeout: Duration,
    /// How long a proxy has to take it.
    pub take_within: Duration,
}

/// The outcome a proxy writes.
#[derive(Debug, Clone)]
pub struct ProbeOutcome<'a> {
    pub healthy: bool,
    pub attempts: u32,
    pub elapsed: Duration,
    pub detail: &'a str,
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl Store {
    /// Records a probe request, fenced by the lease like a journal write: a worker that
    /// lost the deployment asks nothing of anyone.
    pub(crate) async fn request_probe(
        &self,
        owner: &str,
        p: &NewProbe<'_>,
    ) -> Result<ProbeRequest> {
        let row: Option<ProbeRequest> = sqlx::query_as(
            "INSERT INTO remote_probes (deployment_id, target, service, container_id, address,
                                        path, json, timeout_ms, take_by)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, now() + $9 * interval '1 millisecond'
             FROM deployments WHERE id = $1 AND lease_owner = $10 AND state = 'running'
             RETURNING *",
        )
        .bind(p.deployment)
        .bind(p.target)
        .bind(p.service)
        .bind(p.container)
        .bind(p.address)
        .bind(p.path)
        .bind(sqlx::types::Json(p.json))
        .bind(millis(p.timeout))
        .bind(millis(p.take_within))
        .bind(owner)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or(StoreError::LeaseLost)
    }

    /// The newest request for this container of this deployment, on this target.
    pub(crate) async fn latest_probe(
        &self,
        deployment: Uuid,
        target: &str,
        service: &str,
        container: &str,
    ) -> Result<Option<ProbeRequest>> {
        Ok(sqlx::query_as(
            "SELECT * FROM remote_probes
             WHERE deployment_id = $1 AND target = $2 AND service = $3 AND container_id = $4
             ORDER BY requested_at DESC LIMIT 1",
        )
        .bind(deployment)
        .bind(target)
        .bind(service)
        .bind(container)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(crate) async fn probe_request(&self, id: Uuid) -> Result<Option<ProbeRequest>> {
        Ok(sqlx::query_as("SELECT * FROM remote_probes WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Gives up on a request nobody took: `false` when a proxy took it meanwhile.
    pub(crate) async fn lapse_probe(&self, id: Uuid) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE remote_probes SET state = 'lapsed', finished_at = now()
             WHERE id = $1 AND state = 'requested'",
        )
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Takes up to `limit` requests for `target` still within their time to be taken; each
    /// is taken by one proxy only, however many run for the target.
    pub(crate) async fn take_probes(
        &self,
        target: &str,
        by: &str,
        limit: i64,
    ) -> Result<Vec<ProbeRequest>> {
        Ok(sqlx::query_as(
            "WITH due AS (
               SELECT id FROM remote_probes
               WHERE target = $1 AND state = 'requested' AND take_by > now()
               ORDER BY requested_at LIMIT $3
               FOR UPDATE SKIP LOCKED)
             UPDATE remote_probes r SET state = 'probing', taken_by = $2, taken_at = now()
             FROM due WHERE r.id = due.id
             RETURNING r.*",
        )
        .bind(target)
        .bind(pg_text(by))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The outcome of a request this proxy took; `false` if it is no longer its to write.
    pub(crate) async fn finish_probe(
        &self,
        id: Uuid,
        by: &str,
        o: &ProbeOutcome<'_>,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE remote_probes
             SET state = $3, attempts = $4, elapsed_ms = $5, detail = $6, finished_at = now()
             WHERE id = $1 AND taken_by = $2 AND state = 'probing'",
        )
        .bind(id)
        .bind(pg_text(by))
        .bind(
            if o.healthy {
                ProbeState::Healthy
            } else {
                ProbeState::Failed
            }
            .as_str(),
        )
        .bind(o.attempts.min(i32::MAX as u32) as i32)
        .bind(millis(o.elapsed))
        .bind(pg_text(o.detail))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }
}
