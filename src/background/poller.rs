//! The reconcile poller: the safety net for lost notifications (Distribution keeps its
//! outgoing queue in memory; GitHub never redelivers). Per app with `poll` on, one task
//! sleeps its interval, asks the registry what the app follows (for a glob or a range, the
//! highest matching tag of the repository's list), and queues a `reconcile` deployment
//! through intake when that digest neither serves nor is queued or running.
//!
//! Idle-friendly: one timer per polled app, nothing else; no task at all for an app with
//! `poll = "off"`. A config reload starts the timers of apps that poll now and stops those
//! of apps that no longer do; each poll reads its app's settings as they are then. A failing or rate-limiting registry is asked less and less often
//! (`Backoff` from the interval up, at least its `Retry-After`), never more often.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::{AppConfig, LiveConfig};
use crate::domain::POLLER_SOURCE;
use crate::domain::Platform;
use crate::error::error_chain;
use crate::intake::{self, IntakeSource, Parsed, PushEvent};
use crate::registry::tags::{TagLister, TagsError};
use crate::registry::{Registry, RegistryError, Wanted};
use crate::store::{DigestStatus, Store};

/// Longest wait between two polls of a failing registry.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

pub struct Poller {
    /// The config as reloaded: which apps poll, and how often, is read from here.
    pub live: LiveConfig,
    pub store: Store,
    pub registry: Registry,
    pub tags: TagLister,
    pub platform: Platform,
}

/// What one poll found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Nothing to do, and why (it serves, it is queued, nothing matches yet, ...).
    Idle(String),
    /// A `reconcile` deployment was queued for this tag and digest.
    Queued { tag: String, digest: String },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum PollError {
    #[error(transparent)]
    Tags(#[from] TagsError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl PollError {
    /// The least the next attempt must wait: the registry's `Retry-After`.
    fn retry_after(&self) -> Duration {
        match self {
            PollError::Tags(TagsError::RateLimited { retry_after, .. }) => {
                retry_after.unwrap_or_default()
            }
            _ => Duration::ZERO,
        }
    }
}

/// Starts the poller: one timer per app whose `poll` is on (none when no app polls), kept
/// in step with config reloads.
pub fn spawn(tasks: &mut JoinSet<()>, poller: Poller, shutdown: &CancellationToken) {
    let stop = shutdown.clone();
    tasks.spawn(Arc::new(poller).supervise(stop));
}

impl Poller {
    /// Keeps one timer task per polled app of the current config: at start and after each
    /// reload, it starts the missing ones and stops those whose app no longer polls.
    async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut reloaded = self.live.subscribe();
        let mut timers: HashMap<String, CancellationToken> = HashMap::new();
        let mut running = JoinSet::new();
        loop {
            let config = self.live.load();
            timers.retain(|name, stop| {
                let polls = config.app(name).is_some_and(|a| a.poll.is_some());
                if !polls {
                    stop.cancel();
                }
                polls
            });
            for app in config.apps.iter().filter(|a| a.poll.is_some()) {
                if !timers.contains_key(app.name.as_str()) {
                    let stop = shutdown.child_token();
                    timers.insert(app.name.to_string(), stop.clone());
                    let (p, name) = (self.clone(), app.name.clone());
                    running.spawn(async move { p.run(&name, stop).await });
                }
            }
            tokio::select! {
                changed = reloaded.changed() => if changed.is_err() { break },
                Some(_) = running.join_next(), if !running.is_empty() => {}
                _ = shutdown.cancelled() => break,
            }
        }
        while running.join_next().await.is_some() {}
    }

    async fn run(&self, name: &str, shutdown: CancellationToken) {
        // The first poll runs at once: a push lost while Pier was down is found at start.
        let mut delay = Duration::ZERO;
        let mut last_idle = String::new();
        let mut paced: Option<(Duration, Backoff)> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.cancelled() => return,
            }
            // Read at each poll: a reload may have changed the app, or removed it.
            let config = self.live.load();
            let Some((app, every)) = config.app(name).and_then(|a| Some((a, a.poll?))) else {
                return;
            };
            let backoff = match &mut paced {
                Some((was, b)) if *was == every => b,
                _ => {
                    tracing::info!(app = %app.name, every = %humantime::format_duration(every), rule = %app.rule, "polling the registry");
                    &mut paced
                        .insert((every, Backoff::new(every, MAX_BACKOFF.max(every))))
                        .1
                }
            };
            match self.poll_once(app).await {
                Ok(polled) => {
                    backoff.reset();
                    delay = every;
                    match polled {
                        Polled::Queued { tag, digest } => {
                            tracing::info!(app = %app.name, %tag, %digest, "poll found a digest that neither serves nor waits; queued a reconcile deployment");
                        }
                        // Logged when it changes, not at every interval.
                        Polled::Idle(why) if why != last_idle => {
                            tracing::debug!(app = %app.name, "poll: {why}");
                            last_idle = why;
                        }
                        Polled::Idle(_) => {}
                    }
                }
                Err(e) => {
                    delay = backoff
                        .next_delay_at_least(e.retry_after())
                        .unwrap_or(MAX_BACKOFF);
                    tracing::warn!(app = %app.name, error = %error_chain(&e), retry_in = %humantime::format_duration(delay), "poll failed; backing off");
                }
            }
        }
    }

    /// One poll of one app: resolve what it follows and queue it if it is new.
    pub(crate) async fn poll_once(&self, app: &AppConfig) -> Result<Polled, PollError> {
        let tag = match app.rule.fixed() {
            Some(t) => t.to_owned(),
            None => {
                let list = match self.tags.list(app).await {
                    Ok(list) => list,
                    Err(TagsError::Registry(RegistryError::ManifestUnknown { .. })) => {
                        return Ok(Polled::Idle("the repository has no tags yet".into()));
                    }
                    Err(e) => return Err(e.into()),
                };
                if list.truncated {
                    tracing::warn!(app = %app.name, listed = list.tags.len(), "the repository has more tags than one poll lists; the highest match may be missed");
                }
                match app.rule.choose(list.tags.iter().map(String::as_str)) {
                    Some(t) => t.to_owned(),
                    None => return Ok(Polled::Idle(format!("no tag matches {}", app.rule))),
                }
            }
        };
        let resolved = match self
            .registry
            .resolve(app, Wanted::Tag(&tag), &self.platform)
            .await
        {
            Ok(r) => r,
            Err(RegistryError::ManifestUnknown { .. }) => {
                return Ok(Polled::Idle(format!("tag {tag} does not exist yet")));
            }
            Err(e) => return Err(e.into()),
        };
        let digest = String::from(resolved.digest);
        // A pinned app is not moved by the poller: nothing is queued or recorded at each
        // interval (a delivery row per poll would grow without bound while it is pinned).
        if let Some(pin) = self.store.pin(&app.name).await?
            && pin.digest != digest
        {
            return Ok(Polled::Idle(crate::store::pinned_reason(&pin)));
        }
        let status = self.store.digest_status(&app.name, &digest).await?;
        if let Some(idle) = not_new(status, &tag, &digest) {
            return Ok(idle);
        }
        self.deliver(app, tag, digest).await
    }

    /// Queues `digest` of `tag`, through intake, as a delivery of source `poller`.
    async fn deliver(
        &self,
        app: &AppConfig,
        tag: String,
        digest: String,
    ) -> Result<Polled, PollError> {
        // Through intake, as a delivery of source `poller`: the page lists it with its
        // verdict, and the same rules hold (one queued per app, a range never rolls back).
        let mut only = (*self.live.load()).clone();
        only.apps.retain(|a| a.name == app.name);
        let mut event = PushEvent::push(
            Some(app.registry_host().to_owned()),
            app.repository().to_owned(),
            Some(tag.clone()),
            Some(digest.clone()),
        );
        event.event_id = None;
        let parsed = Parsed::events(None, vec![event]);
        let source = IntakeSource {
            name: POLLER_SOURCE,
            registry: Some(app.registry_host()),
            fold_case: false,
        };
        let accepted = intake::run_intake(&only, &self.store, source, parsed, None, None).await?;
        Ok(if accepted.queued_any() {
            Polled::Queued { tag, digest }
        } else {
            Polled::Idle(
                accepted
                    .reason
                    .unwrap_or_else(|| "nothing queued".to_owned()),
            )
        })
    }
}

/// Why a digest that is not new is left alone, or `None` when it is new.
fn not_new(status: DigestStatus, tag: &str, digest: &str) -> Option<Polled> {
    Some(Polled::Idle(match status {
        DigestStatus::Serving => format!("{tag} ({digest}) serves"),
        DigestStatus::Pending => {
            format!("a deployment is queued or running ({tag} is {digest})")
        }
        // Re-queueing a digest that failed would fail again at every interval.
        DigestStatus::Failed => format!(
            "{tag} ({digest}) failed to deploy before; waiting for a new push or a redeploy"
        ),
        DigestStatus::New => return None,
    }))
}
