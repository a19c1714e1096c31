//! `[[notifications]]`: where Pier tells others that a deployment ended, signed (Standard
//! Webhooks) or in Slack's incoming-webhook shape.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::{ConfigError, Secret};

/// The events a notification endpoint can ask for.
pub(crate) const EVENTS: &[&str] = &[
    "deployment.succeeded",
    "deployment.failed",
    "deployment.rolled_back",
    // It started waiting for approval (the payload says for whom, until when).
    "deployment.awaiting_approval",
    // A container of the deployment was killed for memory, or restarts again and again
    // (found by the resource sampler; the payload names the container).
    "container.oom_killed",
    "container.restart_loop",
];

#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotifyFormat {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`.
    StandardWebhooks,
    /// `{"text": "..."}` to an incoming-webhook URL (Slack, Mattermost, Rocket.Chat).
    Slack,
}

/// Where Pier tells others that a deployment ended (or waits for approval), from a durable
/// outbox: the notification row is written in the same transaction that ends the
/// deployment.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotification {
    /// Shown in the delivery log and the metrics (the URL never is); unique.
    name: String,
    /// The receiver, `http` or `https`; may be `env:`/`file:` (a Slack URL is a
    /// credential).
    #[schemars(with = "super::doc_types::SecretText")]
    url: String,
    /// The body and headers sent.
    format: NotifyFormat,
    /// `standard-webhooks` only: the signing key, `whsec_<base64>` of at least 24 bytes,
    /// best as `env:`/`file:`.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    secret: Option<String>,
    /// Only deployments of these apps.
    ///
    /// Default: every app.
    apps: Option<Vec<String>>,
    /// Only these events: `deployment.succeeded`, `deployment.failed`,
    /// `deployment.rolled_back`, `deployment.awaiting_approval`, `container.oom_killed`,
    /// `container.restart_loop`.
    ///
    /// Default: every event.
    events: Option<Vec<String>>,
    /// Each attempt's deadline, at most `60s`.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    timeout: Duration,
    /// Attempts before the notification is given up as failed, 1 to 50.
    #[serde(default = "default_attempts")]
    max_attempts: u32,
    /// The first retry's delay; each next one waits twice as long, at most an hour.
    #[serde(default = "default_backoff", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    backoff: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_attempts() -> u32 {
    8
}
fn default_backoff() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, Clone)]
pub struct NotificationConfig {
    pub name: String,
    pub url: Secret,
    pub format: NotifyFormat,
    /// The decoded Standard Webhooks key.
    pub key: Option<Secret>,
    pub apps: Option<Vec<String>>,
    pub events: Vec<String>,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Duration,
}

/// Why a secret is not a Standard Webhooks `whsec_<base64>` key; the config error names
/// the field before it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookKeyError {
    #[error("must start with whsec_")]
    Prefix,
    #[error("is not base64 after whsec_")]
    Base64,
    #[error("is {0} bytes; use at least 24")]
    Short(usize),
}

/// The HMAC key of a `whsec_<base64>` secret, or why it is not one.
pub fn standard_webhooks_key(secret: &str) -> Result<Vec<u8>, WebhookKeyError> {
    let b64 = secret
        .strip_prefix("whsec_")
        .ok_or(WebhookKeyError::Prefix)?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| WebhookKeyError::Base64)?;
    if key.len() < 24 {
        return Err(WebhookKeyError::Short(key.len()));
    }
    Ok(key)
}

impl RawNotification {
    pub(super) fn resolve(
        self,
        base: &Path,
        apps: &[super::AppConfig],
    ) -> Result<NotificationConfig, ConfigError> {
        let invalid =
            |m: String| ConfigError::Invalid(format!("notification `{}`: {m}", self.name));
        if !crate::domain::is_name(&self.name) {
            return Err(invalid("use lower-case letters, digits, - and _".into()));
        }
        let url = Secret::resolve(&format!("notifications.{}.url", self.name), &self.url, base)?;
        let u = url.expose();
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() > 2048 {
            return Err(invalid("url must be an http or https URL".into()));
        }
        let key = match (self.format, &self.secret) {
            (NotifyFormat::StandardWebhooks, None) => {
                return Err(invalid(
                    "standard-webhooks needs a `secret` (whsec_…)".into(),
                ));
            }
            (NotifyFormat::StandardWebhooks, Some(s)) => {
                let what = format!("notifications.{}.secret", self.name);
                let secret = Secret::resolve(&what, s, base)?;
                standard_webhooks_key(secret.expose())
                    .map_err(|e| invalid(format!("secret {e}")))?;
                Some(secret)
            }
            (NotifyFormat::Slack, Some(_)) => {
                return Err(invalid(
                    "slack takes no `secret`: its URL is the credential".into(),
                ));
            }
            (NotifyFormat::Slack, None) => None,
        };
        if let Some(list) = &self.apps
            && let Some(unknown) = list.iter().find(|a| !apps.iter().any(|c| &c.name == *a))
        {
            return Err(invalid(format!("unknown app `{unknown}`")));
        }
        let events = self
            .events
            .unwrap_or_else(|| EVENTS.iter().map(|e| e.to_string()).collect());
        if let Some(e) = events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
            return Err(invalid(format!(
                "unknown event `{e}`; known: {}",
                EVENTS.join(", ")
            )));
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(60) {
            return Err(invalid("timeout must be between 1ms and 60s".into()));
        }
        if !(1..=50).contains(&self.max_attempts) {
            return Err(invalid("max_attempts must be between 1 and 50".into()));
        }
        Ok(NotificationConfig {
            name: self.name,
            url,
            format: self.format,
            key,
            apps: self.apps,
            events,
            timeout: self.timeout,
            max_attempts: self.max_attempts,
            backoff: self
                .backoff
                .clamp(Duration::from_millis(100), Duration::from_secs(3600)),
        })
    }
}
