//! Outgoing notifications: the sender that empties the outbox. The outbox itself is filled
//! by the database, in the transaction that ends a deployment (migration 0012), with the
//! resource sampler's container events (`store/container_events.rs`), and by the digest
//! timer (`digest.rs`, one row per endpoint and period), so nothing is lost whichever
//! process ends it or dies after. One sender per process; several processes
//! share the outbox through SKIP LOCKED claims.
//!
//! Idle-friendly: with nothing pending, the sender waits for the outbox's NOTIFY and sends
//! no query. Every call has a deadline (the endpoint's `timeout`), every retry a bound
//! (`max_attempts`, with doubling backoff, never sooner than a receiver's `Retry-After`),
//! every endpoint a rate limit (`limits.rs`); URLs, tokens and keys are never logged or
//! stored, only the endpoint's name. Each format's request is its own file in `channels/`.

mod channels;
pub(crate) mod digest;
mod limits;
mod message;
mod outcome;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::{Config, NotificationConfig};
use crate::error::error_chain;
use crate::gates::{ApprovalLink, LinkAction, LinkKey};
use crate::store::{Channel, DueNotification, Endpoint, Store, StoreError};
use message::{Event, Links, Message};
use outcome::Attempt;

/// Notifications claimed per query.
const BATCH: i64 = 16;

/// The endpoints as the outbox trigger reads them.
pub(crate) fn endpoints(config: &Config) -> Vec<Endpoint> {
    config
        .notifications
        .iter()
        .map(|n| Endpoint {
            name: n.name.clone(),
            apps: n.apps.clone(),
            events: n.events.clone(),
        })
        .collect()
}

pub(crate) struct Sender {
    pub store: Store,
    pub endpoints: Vec<NotificationConfig>,
    /// Where Pier's pages are reached (`server.public_url`): each notification links there.
    pub public_url: String,
}

/// What a running sender holds: its HTTP client, the link key, the rate limits.
struct Running {
    http: reqwest::Client,
    links: LinkKey,
    limits: limits::Limits,
}

impl Sender {
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        if self.endpoints.is_empty() {
            return;
        }
        let http = match crate::runtime::with_shared_tls(reqwest::Client::builder())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(2)
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "notifications: cannot build the HTTP client; none will be sent");
                return;
            }
        };
        let Some(key) = self.link_key(&shutdown).await else {
            return;
        };
        let limits = limits::Limits::new(
            self.endpoints
                .iter()
                .map(|e| (e.name.as_str(), e.rate_limit)),
        );
        let mut running = Running {
            http,
            links: key,
            limits,
        };
        self.serve(&mut running, &shutdown).await;
    }

    /// The approval links' key, from the installation key (one query at start).
    async fn link_key(&self, shutdown: &CancellationToken) -> Option<LinkKey> {
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        loop {
            match self.store.installation_key().await {
                Ok(k) => return Some(LinkKey::derive(&k)),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "notifications: cannot read the installation key; retrying");
                    if !backoff.wait_or(shutdown).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Sends what is due, then sleeps until the next is due or a NOTIFY says more came.
    async fn serve(&self, running: &mut Running, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        let mut listener = None;
        while !shutdown.is_cancelled() {
            if listener.is_none() {
                match self.store.own_listener(Channel::Outbox).await {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "notifications: cannot listen; retrying");
                        if !backoff.wait_or(shutdown).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            let next = match self.send_due(running).await {
                Ok(next) => {
                    backoff.reset();
                    next
                }
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "notifications: outbox unavailable; retrying");
                    if !backoff.wait_or(shutdown).await {
                        return;
                    }
                    continue;
                }
            };
            let Some(l) = listener.as_mut() else { continue };
            let sleep = next.unwrap_or(Duration::from_secs(86_400));
            tokio::select! {
                msg = l.try_recv() => if !matches!(msg, Ok(Some(_))) {
                    // The connection dropped: NOTIFYs may have been lost; look again.
                    listener = None;
                },
                _ = tokio::time::sleep(sleep) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Sends every due notification each endpoint's rate limit allows now; then how long
    /// until the next one may go (`None`: nothing pending, wait for a NOTIFY).
    async fn send_due(&self, running: &mut Running) -> Result<Option<Duration>, StoreError> {
        let mut limited = None::<Duration>;
        let mut open = Vec::new();
        for ep in &self.endpoints {
            let mut held = false;
            // Bounded: each pass takes at most this many batches per endpoint.
            for _ in 0..64 {
                let now = tokio::time::Instant::now();
                let allowed = running.limits.available(&ep.name, now);
                if allowed == 0 {
                    let wait = running.limits.ready_in(&ep.name, now);
                    limited = Some(limited.map_or(wait, |l| l.min(wait)));
                    held = true;
                    break;
                }
                let hold = ep.timeout + Duration::from_secs(30);
                let limit = BATCH.min(i64::from(allowed));
                let due = self
                    .store
                    .claim_notifications(std::slice::from_ref(&ep.name), hold, limit)
                    .await?;
                for n in &due {
                    running.limits.take(&ep.name, tokio::time::Instant::now());
                    self.send_one(running, ep, n).await?;
                }
                if (due.len() as i64) < limit {
                    break;
                }
            }
            if !held {
                open.push(ep.name.clone());
            }
        }
        // Endpoints held by their limit are woken by their own timer, not by their due
        // rows (those are due now, and would wake the sender at once, again and again).
        let due = match open.is_empty() {
            true => None,
            false => self.store.next_notification_due(&open).await?,
        };
        Ok(match (due, limited) {
            (Some(d), Some(l)) => Some(d.min(l)),
            (d, l) => d.or(l),
        })
    }

    /// The message of `n` for `ep`: an approval request carries its signed links.
    fn message(
        &self,
        running: &Running,
        ep: &NotificationConfig,
        n: &DueNotification,
    ) -> Option<Message> {
        // The outbox's CHECK allows only known events; one written by a newer Pier is
        // given up, never sent as something else.
        let event: Event = n.event.parse().ok()?;
        let page = match n.deployment_id {
            Some(id) => format!("{}/deployments/{id}", self.public_url),
            None => format!("{}/", self.public_url),
        };
        let links = match (event, n.deployment_id) {
            (Event::AwaitingApproval, Some(id)) => Some(self.links(running, ep, n, id)),
            _ => None,
        };
        Some(Message::of(n, event, page, links))
    }

    /// An approval's links: valid for the endpoint's `link_lifetime`, never past the
    /// request's own expiry; the nonce is the notification's id, so each link opens once.
    fn links(
        &self,
        running: &Running,
        ep: &NotificationConfig,
        n: &DueNotification,
        id: uuid::Uuid,
    ) -> Links {
        let lifetime = chrono::Duration::from_std(ep.link_lifetime).unwrap_or_default();
        let mut expires = chrono::Utc::now() + lifetime;
        if let Some(until) = n
            .payload
            .get("waiting_until")
            .and_then(|v| v.as_str())
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        {
            expires = expires.min(until.with_timezone(&chrono::Utc));
        }
        let expires = chrono::DateTime::from_timestamp(expires.timestamp(), 0).unwrap_or(expires);
        let link = |action| ApprovalLink {
            deployment: id,
            action,
            approver: ep.approver.clone(),
            expires,
            nonce: n.id,
        };
        let url = |action| format!("{}{}", self.public_url, link(action).path(&running.links));
        Links {
            approve: url(LinkAction::Approve),
            reject: url(LinkAction::Reject),
        }
    }

    async fn send_one(
        &self,
        running: &mut Running,
        ep: &NotificationConfig,
        n: &DueNotification,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let Some(msg) = self.message(running, ep, n) else {
            let why = format!("unknown event `{}`", crate::actions::clip(&n.event, 64));
            log_attempt(ep, n, Some(&why), None);
            return self
                .store
                .record_attempt(n, None, Some(&why), started.elapsed(), false, None)
                .await;
        };
        let call = channels::Call {
            http: &running.http,
            timeout: ep.timeout,
            n,
        };
        let attempt = channels::deliver(&call, &ep.destination, &msg).await;
        let took = started.elapsed();
        let (status, error, asked) = match &attempt {
            Attempt::Sent { status } => (*status, None, None),
            Attempt::NotSent {
                status,
                reason,
                retry_after,
            } => (*status, Some(reason.clone()), *retry_after),
        };
        if let Some(wait) = asked {
            running
                .limits
                .pause(&ep.name, tokio::time::Instant::now(), wait);
        }
        let sent = error.is_none();
        let retry_in = match sent {
            true => None,
            false => outcome::retry_in(n.attempts, ep.max_attempts, ep.backoff, asked),
        };
        log_attempt(ep, n, error.as_deref(), retry_in);
        self.store
            .record_attempt(n, status, error.as_deref(), took, sent, retry_in)
            .await
    }
}

fn log_attempt(
    ep: &NotificationConfig,
    n: &DueNotification,
    error: Option<&str>,
    retry_in: Option<Duration>,
) {
    let result = match (error, retry_in) {
        (None, _) => "sent",
        (Some(_), Some(_)) => "retry",
        (Some(_), None) => "failed",
    };
    metrics::counter!("pier_notifications_total", "endpoint" => ep.name.clone(), "event" => n.event.clone(), "result" => result).increment(1);
    match error {
        Some(error) => {
            metrics::counter!("pier_notification_failures_total", "endpoint" => ep.name.clone())
                .increment(1);
            tracing::warn!(endpoint = %ep.name, event = %n.event, attempt = n.attempts,
                error, retry_in = ?retry_in, "notification not delivered");
        }
        None => tracing::debug!(endpoint = %ep.name, event = %n.event, "notification sent"),
    }
}
