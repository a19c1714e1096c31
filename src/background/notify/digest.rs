//! The digest timer: one task, one timer for the earliest next digest moment of every
//! endpoint with `digest`, and no query between two moments. At a moment, each process
//! that fires puts the endpoint's summary of the period that just ended in the outbox;
//! the outbox's unique (endpoint, period) lets exactly one insert win, and the sender
//! delivers it like any notification (retries, rate limits, the attempts' log).
//!
//! A Pier that was down at a moment sends that period's digest when it starts, if it
//! starts within [`CATCH_UP`] after it; an older period is not sent late.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::{Config, DigestSchedule};
use crate::error::error_chain;
use crate::store::{Store, StoreError};

/// How late after its moment a starting Pier still sends a period's digest.
const CATCH_UP: chrono::Duration = chrono::Duration::hours(1);
/// Longest single sleep: the timer looks at the wall clock again at least this often
/// (no query), so a changed clock or a suspended host cannot skip a day.
const MAX_SLEEP: Duration = Duration::from_secs(3600);

struct DigestEndpoint {
    name: String,
    schedule: DigestSchedule,
    apps: Vec<String>,
}

pub(crate) struct Digests {
    pub config: Arc<Config>,
    pub store: Store,
}

impl Digests {
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let all_apps: Vec<String> = self
            .config
            .apps
            .iter()
            .map(|a| a.name.to_string())
            .collect();
        let endpoints: Vec<DigestEndpoint> = self
            .config
            .notifications
            .iter()
            .filter_map(|n| {
                Some(DigestEndpoint {
                    name: n.name.clone(),
                    schedule: n.digest.clone()?,
                    apps: n.apps.clone().unwrap_or_else(|| all_apps.clone()),
                })
            })
            .collect();
        if endpoints.is_empty() {
            return;
        }
        let start = Utc::now();
        for ep in &endpoints {
            if let Some(last) = ep.schedule.last_at_or_before(start)
                && start - last < CATCH_UP
            {
                self.fire(ep, last, &shutdown).await;
            }
        }
        let mut after = start;
        loop {
            let Some(next) = endpoints
                .iter()
                .filter_map(|e| e.schedule.next_after(after))
                .min()
            else {
                return;
            };
            let wait = (next - Utc::now()).to_std().unwrap_or_default();
            tokio::select! {
                _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
                _ = shutdown.cancelled() => return,
            }
            let now = Utc::now();
            if now < next {
                continue;
            }
            for ep in &endpoints {
                if let Some(m) = ep.schedule.last_at_or_before(now).filter(|m| *m > after) {
                    self.fire(ep, m, &shutdown).await;
                }
            }
            after = now;
        }
    }

    /// Puts the digest of the period ending at `moment` in the outbox (once, whoever
    /// else does too), retrying while the database is away, for at most ten minutes.
    async fn fire(&self, ep: &DigestEndpoint, moment: DateTime<Utc>, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60))
            .within(Duration::from_secs(600));
        loop {
            match self.insert(ep, moment).await {
                Ok(inserted) => {
                    tracing::info!(endpoint = %ep.name, period = %moment, inserted, "digest due");
                    return;
                }
                Err(e) if !backoff.expired() => {
                    tracing::warn!(error = %error_chain(&e), endpoint = %ep.name, "digest: database unavailable; retrying");
                    if !backoff.wait_or(shutdown).await {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), endpoint = %ep.name, "digest not sent for this period");
                    return;
                }
            }
        }
    }

    async fn insert(&self, ep: &DigestEndpoint, moment: DateTime<Utc>) -> Result<bool, StoreError> {
        let to = moment.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let period = format!("{}:{to}", ep.schedule.name());
        if self.store.digest_exists(&ep.name, &period).await? {
            return Ok(false);
        }
        let from = moment - ep.schedule.length();
        let apps = self.store.digest_summary(&ep.apps, from, moment).await?;
        let payload = serde_json::json!({
            "every": ep.schedule.name(),
            "from": from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "to": to,
            "apps": apps,
        });
        self.store.insert_digest(&ep.name, &period, &payload).await
    }
}
