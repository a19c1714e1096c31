//! `[[notifications]]`: where Pier tells others that a deployment ended or waits for
//! approval, and where a daily or weekly digest goes. Each entry names its `format` (the
//! channel kind) and that format's own fields (`channel.rs`); a field the format needs and
//! lacks, or one it does not take, is a config error that names it.

mod channel;
mod digest;

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
pub use channel::{Destination, EmailChannel, NotifyFormat, SmtpTls};
pub use digest::{DigestEvery, DigestSchedule};

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

/// Where Pier tells others that a deployment ended, waits for approval, or that one of its
/// containers was killed for memory or restarts in a loop: one channel (`format`) with its
/// own fields. Notifications leave from a durable outbox: the row is written in the same
/// transaction that ends the deployment.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotification {
    /// Shown in the delivery log and the metrics (URLs and tokens never are); unique.
    pub(super) name: String,
    /// The channel, and so the request sent and the fields this entry takes (a field of
    /// another format is refused). Required.
    pub(super) format: Option<NotifyFormat>,
    /// The receiver: the webhook URL of `standard-webhooks`, `slack`, `discord` and `teams`
    /// (a credential for the last three), or ntfy's topic URL; `http` or `https`.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) url: Option<String>,
    /// `standard-webhooks`: the signing key, `whsec_<base64>` of at least 24 bytes.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) secret: Option<String>,
    /// `ntfy`: an access token, sent as `Authorization: Bearer`.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) token: Option<String>,
    /// `telegram`: the bot's token (it goes in the URL path, so it is a secret).
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) bot_token: Option<String>,
    /// `telegram`: the chat to post to (`"-1001234567890"`, `"@channel"`).
    pub(super) chat_id: Option<String>,
    /// `telegram`: the Bot API server.
    ///
    /// Default: `"https://api.telegram.org"`.
    pub(super) api_url: Option<String>,
    /// `matrix`: the homeserver's base URL.
    pub(super) homeserver: Option<String>,
    /// `matrix`: the room to post to (`"!abc:example.org"`).
    pub(super) room_id: Option<String>,
    /// `matrix`: the access token of the account that posts.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) access_token: Option<String>,
    /// `email`: the SMTP server.
    pub(super) smtp_host: Option<String>,
    /// `email`: its port.
    ///
    /// Default: `587` (`starttls`), `465` (`tls`).
    pub(super) smtp_port: Option<u16>,
    /// `email`: how the connection is secured; there is no plain mode.
    ///
    /// Default: `"starttls"`.
    pub(super) smtp_tls: Option<SmtpTls>,
    /// `email`: the login; give `smtp_password` too.
    pub(super) smtp_user: Option<String>,
    /// `email`: the login's password.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    pub(super) smtp_password: Option<String>,
    /// `email`: a PEM file of the CA that signs the SMTP server's certificate, trusted
    /// instead of the system's roots.
    pub(super) smtp_ca: Option<String>,
    /// `email`: the sender, `"Pier <pier@example.org>"`.
    pub(super) from: Option<String>,
    /// `email`: the recipients.
    pub(super) to: Option<Vec<String>>,
    /// Only deployments of these apps.
    ///
    /// Default: every app.
    apps: Option<Vec<String>>,
    /// Only these events: `deployment.succeeded`, `deployment.failed`,
    /// `deployment.rolled_back`, `deployment.awaiting_approval`, `container.oom_killed`,
    /// `container.restart_loop`; `[]` for a digest only.
    ///
    /// Default: every event.
    events: Option<Vec<String>>,
    /// Each attempt's deadline (an email's whole SMTP exchange), at most `60s`.
    ///
    /// Default: `"10s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    timeout: Option<Duration>,
    /// Attempts before the notification is given up as failed, 1 to 50.
    ///
    /// Default: `8`.
    max_attempts: Option<u32>,
    /// The first retry's delay; each next one waits twice as long, at most an hour.
    ///
    /// Default: `"5s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    backoff: Option<Duration>,
    /// Sends to this endpoint per period, by each Pier process: `"30/min"`, `"1/s"`,
    /// `"500/h"`. A 429 or 503 with `Retry-After` (seconds or an HTTP date, at most an
    /// hour) holds the endpoint and the retry that long.
    ///
    /// Default: `"20/min"`.
    rate_limit: Option<String>,
    /// The named admin whose approval links this endpoint's messages carry.
    ///
    /// Default: any admin the app's `approval.from` names.
    approver: Option<String>,
    /// How long an approval link stays valid (at most until the request expires), `1s` to
    /// `30d`.
    ///
    /// Default: `"24h"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    link_lifetime: Option<Duration>,
    /// A summary of the endpoint's apps once per period: `"daily"` or `"weekly"`.
    digest: Option<DigestEvery>,
    /// When the digest goes out: `"09:00 UTC"`; weekly with a day, `"Mon 09:00
    /// Europe/Berlin"`.
    ///
    /// Default: `"09:00 UTC"`, weekly `"Mon 09:00 UTC"`.
    digest_at: Option<String>,
}

/// At most `count` sends per `per` to one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub count: u32,
    pub per: Duration,
}

impl RateLimit {
    /// `N/s`, `N/min`, `N/h` (also `second`, `minute`, `hour`).
    pub(crate) fn parse(text: &str) -> Option<RateLimit> {
        let (n, unit) = text.trim().split_once('/')?;
        let count: u32 = n.trim().parse().ok().filter(|n| (1..=10_000).contains(n))?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return None,
        };
        Some(RateLimit { count, per })
    }
}

#[derive(Debug, Clone)]
pub struct NotificationConfig {
    pub name: String,
    /// Where and how messages go, with that format's own settings and secrets.
    pub destination: Destination,
    pub apps: Option<Vec<String>>,
    pub events: Vec<String>,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Duration,
    pub rate_limit: RateLimit,
    pub approver: Option<String>,
    pub link_lifetime: Duration,
    pub digest: Option<DigestSchedule>,
}

impl NotificationConfig {
    pub fn format(&self) -> NotifyFormat {
        self.destination.format()
    }
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
    use base64::Engine as _;
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

/// Default `rate_limit`: well under what chat services allow one webhook (Discord 30/min,
/// Telegram 20/min in a group, Slack about 1/s), so a burst of outcomes is spread out.
const DEFAULT_RATE: RateLimit = RateLimit {
    count: 20,
    per: Duration::from_secs(60),
};

impl RawNotification {
    pub(super) fn resolve(
        self,
        base: &Path,
        config: (&[super::AppConfig], &[super::NamedAdmin]),
    ) -> Result<NotificationConfig, ConfigError> {
        let (apps, admins) = config;
        let name = self.name.clone();
        let invalid = |m: String| ConfigError::Invalid(format!("notification `{name}`: {m}"));
        if !crate::domain::is_name(&self.name) {
            return Err(invalid("use lower-case letters, digits, - and _".into()));
        }
        let destination = channel::resolve(&self, base)?;
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
        let timeout = self.timeout.unwrap_or(Duration::from_secs(10));
        if timeout.is_zero() || timeout > Duration::from_secs(60) {
            return Err(invalid("timeout must be between 1ms and 60s".into()));
        }
        let max_attempts = self.max_attempts.unwrap_or(8);
        if !(1..=50).contains(&max_attempts) {
            return Err(invalid("max_attempts must be between 1 and 50".into()));
        }
        let rate_limit = match &self.rate_limit {
            None => DEFAULT_RATE,
            Some(r) => RateLimit::parse(r).ok_or_else(|| {
                invalid(format!(
                    "rate_limit `{r}`: write it as `30/min`, `1/s` or `500/h`"
                ))
            })?,
        };
        if let Some(a) = &self.approver
            && !admins.iter().any(|n| &n.name == a)
        {
            return Err(invalid(format!("approver `{a}` is not an [[admins]] name")));
        }
        let digest = digest::resolve(self.digest, self.digest_at.as_deref())
            .map_err(|e| invalid(e.to_string()))?;
        let link_lifetime = self.link_lifetime.unwrap_or(Duration::from_secs(86_400));
        if link_lifetime < Duration::from_secs(1)
            || link_lifetime > Duration::from_secs(30 * 86_400)
        {
            return Err(invalid(
                "link_lifetime must be between 1s and 30 days".into(),
            ));
        }
        Ok(NotificationConfig {
            name: self.name,
            destination,
            apps: self.apps,
            events,
            timeout,
            max_attempts,
            backoff: self
                .backoff
                .unwrap_or(Duration::from_secs(5))
                .clamp(Duration::from_millis(100), Duration::from_secs(3600)),
            rate_limit,
            approver: self.approver,
            link_lifetime,
            digest,
        })
    }
}

#[cfg(test)]
mod tests;
