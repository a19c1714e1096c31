//! Outgoing notifications: the sender that empties the outbox. The outbox itself is filled
//! by the database, in the transaction that ends a deployment (migration 0012), so nothing
//! is lost whichever process ends it or dies after. One sender per process; several
//! processes share the outbox through SKIP LOCKED claims.
//!
//! Idle-friendly: with nothing pending, the sender waits for the outbox's NOTIFY and sends
//! no query. Every call has a deadline (the endpoint's `timeout`), every retry a bound
//! (`max_attempts`, with doubling backoff); the URL (a Slack URL is a credential) and the
//! key are never logged or stored, only the endpoint's name.

use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::{Config, NotificationConfig, NotifyFormat, standard_webhooks_key};
use crate::error::error_chain;
use crate::store::{Channel, DueNotification, Endpoint, Store};

/// Notifications claimed per query.
const BATCH: i64 = 16;
/// Longest wait between two retries of one notification.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

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

/// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, as Standard Webhooks defines it.
pub(crate) fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The body an endpoint gets for a notification; `url` is the deployment's page.
pub(crate) fn body(format: NotifyFormat, n: &DueNotification, url: &str) -> serde_json::Value {
    match format {
        NotifyFormat::StandardWebhooks => serde_json::json!({
            "type": n.event,
            "timestamp": n.payload.get("finished_at"),
            "data": n.payload,
            "url": url,
        }),
        NotifyFormat::Slack => {
            let p = &n.payload;
            let s = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let mut text = format!(
                "Pier: {} deployment {} {}",
                n.app,
                s("id"),
                n.event.trim_start_matches("deployment.")
            );
            if !s("digest").is_empty() {
                text.push_str(&format!(" ({}", s("digest")));
                if !s("tag").is_empty() {
                    text.push_str(&format!(", tag {}", s("tag")));
                }
                text.push(')');
            }
            if !s("error").is_empty() {
                text.push_str(&format!(
                    ": {}",
                    s("error").chars().take(300).collect::<String>()
                ));
            }
            if !s("waiting_for").is_empty() {
                text.push_str(&format!(": waits for {}", s("waiting_for")));
            }
            text.push_str(&format!(" {url}"));
            serde_json::json!({ "text": text })
        }
    }
}

pub(crate) struct Sender {
    pub store: Store,
    pub endpoints: Vec<NotificationConfig>,
    /// Where Pier's pages are reached (`server.public_url`): each notification links there.
    pub public_url: String,
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
        let names: Vec<String> = self.endpoints.iter().map(|e| e.name.clone()).collect();
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        let mut listener = None;
        while !shutdown.is_cancelled() {
            if listener.is_none() {
                match self.store.own_listener(Channel::Outbox).await {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "notifications: cannot listen; retrying");
                        if !backoff.wait_or(&shutdown).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            let next = match self.send_due(&http, &names).await {
                Ok(next) => {
                    backoff.reset();
                    next
                }
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "notifications: outbox unavailable; retrying");
                    if !backoff.wait_or(&shutdown).await {
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

    /// Sends every due notification; then how long until the next one is due.
    async fn send_due(
        &self,
        http: &reqwest::Client,
        names: &[String],
    ) -> Result<Option<Duration>, crate::store::StoreError> {
        let hold = self
            .endpoints
            .iter()
            .map(|e| e.timeout)
            .max()
            .unwrap_or_default()
            + Duration::from_secs(30);
        // Bounded: each pass takes at most this many batches before it sleeps.
        for _ in 0..64 {
            let due = self.store.claim_notifications(names, hold, BATCH).await?;
            if due.is_empty() {
                break;
            }
            for n in &due {
                if let Some(ep) = self.endpoints.iter().find(|e| e.name == n.endpoint) {
                    self.send_one(http, ep, n).await?;
                }
            }
        }
        self.store.next_notification_due(names).await
    }

    async fn send_one(
        &self,
        http: &reqwest::Client,
        ep: &NotificationConfig,
        n: &DueNotification,
    ) -> Result<(), crate::store::StoreError> {
        let url = format!("{}/deployments/{}", self.public_url, n.deployment_id);
        let body = serde_json::to_vec(&body(ep.format, n, &url)).unwrap_or_default();
        let mut req = http
            .post(ep.url.expose())
            .timeout(ep.timeout)
            .header("content-type", "application/json")
            .header("user-agent", concat!("pier/", env!("CARGO_PKG_VERSION")));
        if let (NotifyFormat::StandardWebhooks, Some(secret)) = (ep.format, &ep.key) {
            let key = standard_webhooks_key(secret.expose()).unwrap_or_default();
            let id = format!("msg_{}", n.id.simple());
            let ts = chrono::Utc::now().timestamp();
            req = req
                .header("webhook-id", &id)
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", sign(&key, &id, ts, &body));
        }
        let started = Instant::now();
        let (status, error) = match req.body(body).send().await {
            Ok(resp) if resp.status().is_success() => (Some(resp.status().as_u16()), None),
            Ok(resp) => (
                Some(resp.status().as_u16()),
                Some(format!("the receiver answered {}", resp.status())),
            ),
            // Without the URL: a Slack URL is a credential.
            Err(e) => (None, Some(error_chain(&e.without_url()))),
        };
        let took = started.elapsed();
        let sent = error.is_none();
        let retry_in = (!sent && (n.attempts as u32) < ep.max_attempts).then(|| {
            let doublings = (n.attempts.max(1) - 1).min(20) as u32;
            ep.backoff.saturating_mul(1 << doublings).min(MAX_BACKOFF)
        });
        let result = match (sent, retry_in) {
            (true, _) => "sent",
            (false, Some(_)) => "retry",
            (false, None) => "failed",
        };
        metrics::counter!("pier_notifications_total", "endpoint" => ep.name.clone(), "event" => n.event.clone(), "result" => result).increment(1);
        if !sent {
            metrics::counter!("pier_notification_failures_total", "endpoint" => ep.name.clone())
                .increment(1);
            tracing::warn!(endpoint = %ep.name, event = %n.event, attempt = n.attempts,
                error = error.as_deref().unwrap_or(""), retry_in = ?retry_in, "notification not delivered");
        } else {
            tracing::debug!(endpoint = %ep.name, event = %n.event, "notification sent");
        }
        self.store
            .record_attempt(n, status, error.as_deref(), took, sent, retry_in)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let key = standard_webhooks_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
