//! Promotion. An app with `promote_from = "web-staging"` and `after = "15m"` is
//! deployed only with the digest that `web-staging` has served healthily for `after`.
//!
//! One task per process, one timer: it looks when a source app's queue changes (the
//! queue's NOTIFY names the app), when the earliest proven digest comes due, and at each
//! sweep; an idle Pier sends nothing in between. Several processes may look at once: the
//! store queues each promotion once, under the target app's lock.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{AppConfig, LiveConfig};
use crate::error::error_chain;
use crate::store::{Channel, Enqueued, NewDeployment, Store, Trigger};

pub(crate) struct Promoter {
    pub live: LiveConfig,
    pub store: Store,
    pub sweep: Duration,
}

fn promotion(app: &AppConfig, digest: &str) -> NewDeployment {
    NewDeployment {
        app: app.name.to_string(),
        trigger: Trigger::Promotion,
        delivery_id: None,
        image: app.image.clone(),
        requested_tag: None,
        claimed_digest: Some(digest.to_owned()),
        pinned: true,
    }
}

impl Promoter {
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let mut reloaded = self.live.subscribe();
        // Source deployments looked at already: a promotion refused (the same digest is
        // pending by hand) is not tried again at once, in a loop.
        let mut tried: HashSet<Uuid> = HashSet::new();
        let mut listener = None;
        loop {
            let config = self.live.load();
            let sources: Vec<String> = config
                .apps
                .iter()
                .filter_map(|a| Some(a.gates.promotion.as_ref()?.from.clone()))
                .collect();
            if sources.is_empty() {
                listener = None;
                tokio::select! {
                    r = reloaded.changed() => if r.is_err() { return },
                    _ = shutdown.cancelled() => return,
                }
                continue;
            }
            if listener.is_none() {
                match self.store.own_listener(Channel::Queue).await {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "promotions: cannot listen; looking at each sweep")
                    }
                }
            }
            let next = self.look(&config.apps, &mut tried).await;
            let pause = next.unwrap_or(self.sweep).min(self.sweep);
            let deadline = tokio::time::Instant::now() + pause;
            // Wait for a change of a source app, the next due time, a reload, or shutdown.
            loop {
                let note = async {
                    match listener.as_mut() {
                        Some(l) => l.try_recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    n = note => match n {
                        Ok(Some(n)) if !sources.iter().any(|s| s == n.payload()) => continue,
                        Ok(Some(_)) => break,
                        // Dropped: NOTIFYs may have been missed; listen again and look.
                        Ok(None) | Err(_) => { listener = None; break }
                    },
                    _ = tokio::time::sleep_until(deadline) => break,
                    r = reloaded.changed() => { if r.is_err() { return } break }
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }

    /// Queues every promotion that is due; returns when the next one comes due.
    async fn look(&self, apps: &[AppConfig], tried: &mut HashSet<Uuid>) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        for app in apps {
            let Some(p) = &app.gates.promotion else {
                continue;
            };
            let proven = match self.store.proven(&p.from, &app.name).await {
                Ok(Some(proven)) if !tried.contains(&proven.deployment_id) => proven,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(app = %app.name, error = %error_chain(&e), "promotions: cannot read what the source serves");
                    continue;
                }
            };
            let after = chrono::Duration::from_std(p.after).unwrap_or(chrono::Duration::MAX);
            let left = (proven.finished_at + after - Utc::now())
                .to_std()
                .unwrap_or_default();
            if !left.is_zero() {
                next = Some(next.map_or(left, |n| n.min(left)));
                continue;
            }
            tried.insert(proven.deployment_id);
            let d = promotion(app, &proven.digest);
            match self
                .store
                .promote(&p.from, proven.deployment_id, p.after, d)
                .await
            {
                Ok(Some(Enqueued::Queued { id, .. })) => {
                    tracing::info!(app = %app.name, from = %p.from, %id, digest = %proven.digest, "promotion queued");
                }
                Ok(_) => {}
                Err(e) => {
                    tried.remove(&proven.deployment_id);
                    tracing::warn!(app = %app.name, error = %error_chain(&e), "promotions: cannot queue; trying at the next sweep");
                }
            }
        }
        next.map(|n| n + Duration::from_millis(20))
    }
}
