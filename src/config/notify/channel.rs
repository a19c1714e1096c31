//! Each notification format's own fields: which it needs, which it refuses, and the typed
//! [`Destination`] they resolve to. Secrets (webhook URLs, tokens, the SMTP password) are
//! [`Secret`]s from here on: never printed, never in an error.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

use super::RawNotification;
use crate::config::{ConfigError, Secret};

/// A notification channel's kind, as `format` names it.
#[derive(
    schemars::JsonSchema,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum NotifyFormat {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`.
    StandardWebhooks,
    /// `{"text": "..."}` to an incoming-webhook URL (Slack, Mattermost, Rocket.Chat).
    Slack,
    /// A Discord webhook, with an embed.
    Discord,
    /// A Microsoft Teams Workflows webhook, with an Adaptive Card.
    Teams,
    /// A POST to an ntfy topic URL with Title, Priority, Tags and Click headers.
    Ntfy,
    /// Telegram's Bot API `sendMessage`.
    Telegram,
    /// A Matrix room message through the client-server API.
    Matrix,
    /// An email over SMTP.
    Email,
}

/// How the SMTP connection is secured. There is no plain mode: the password and the
/// approval links would cross the network readable.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SmtpTls {
    /// Plain connect, then `STARTTLS` (required: a server that does not offer it fails).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

#[derive(Debug, Clone)]
pub struct EmailChannel {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    /// User name and password, when the server wants them.
    pub credentials: Option<(String, Secret)>,
    /// Trusted instead of the system's roots, when given.
    pub ca_file: Option<PathBuf>,
    pub from: String,
    pub to: Vec<String>,
}

/// Where one endpoint's messages go, with the settings that format needs.
#[derive(Debug, Clone)]
pub enum Destination {
    StandardWebhooks {
        url: Secret,
        key: Secret,
    },
    Slack {
        url: Secret,
    },
    Discord {
        url: Secret,
    },
    Teams {
        url: Secret,
    },
    Ntfy {
        url: Secret,
        token: Option<Secret>,
    },
    Telegram {
        api_url: String,
        bot_token: Secret,
        chat_id: String,
    },
    Matrix {
        homeserver: String,
        room_id: String,
        access_token: Secret,
    },
    Email(EmailChannel),
}

impl Destination {
    pub fn format(&self) -> NotifyFormat {
        match self {
            Destination::StandardWebhooks { .. } => NotifyFormat::StandardWebhooks,
            Destination::Slack { .. } => NotifyFormat::Slack,
            Destination::Discord { .. } => NotifyFormat::Discord,
            Destination::Teams { .. } => NotifyFormat::Teams,
            Destination::Ntfy { .. } => NotifyFormat::Ntfy,
            Destination::Telegram { .. } => NotifyFormat::Telegram,
            Destination::Matrix { .. } => NotifyFormat::Matrix,
            Destination::Email(_) => NotifyFormat::Email,
        }
    }
}

/// The fields that belong to some formats only, with whether the entry gives each.
fn specific_fields(r: &RawNotification) -> [(&'static str, bool); 15] {
    [
        ("url", r.url.is_some()),
        ("secret", r.secret.is_some()),
        ("token", r.token.is_some()),
        ("bot_token", r.bot_token.is_some()),
        ("chat_id", r.chat_id.is_some()),
        ("api_url", r.api_url.is_some()),
        ("homeserver", r.homeserver.is_some()),
        ("room_id", r.room_id.is_some()),
        ("access_token", r.access_token.is_some()),
        ("smtp_host", r.smtp_host.is_some()),
        ("smtp_port", r.smtp_port.is_some()),
        ("smtp_tls", r.smtp_tls.is_some()),
        ("smtp_user", r.smtp_user.is_some()),
        ("smtp_password", r.smtp_password.is_some()),
        ("smtp_ca", r.smtp_ca.is_some()),
    ]
}

/// The format-specific fields each format takes (required or optional).
fn takes(format: NotifyFormat) -> &'static [&'static str] {
    match format {
        NotifyFormat::StandardWebhooks => &["url", "secret"],
        NotifyFormat::Slack | NotifyFormat::Discord | NotifyFormat::Teams => &["url"],
        NotifyFormat::Ntfy => &["url", "token"],
        NotifyFormat::Telegram => &["bot_token", "chat_id", "api_url"],
        NotifyFormat::Matrix => &["homeserver", "room_id", "access_token"],
        NotifyFormat::Email => &[
            "smtp_host",
            "smtp_port",
            "smtp_tls",
            "smtp_user",
            "smtp_password",
            "smtp_ca",
        ],
    }
}

/// What one entry's checks need at hand: its name, format and the config's folder.
struct Fields<'a> {
    raw: &'a RawNotification,
    format: NotifyFormat,
    base: &'a Path,
}

impl Fields<'_> {
    fn invalid(&self, m: impl std::fmt::Display) -> ConfigError {
        ConfigError::Invalid(format!("notification `{}`: {m}", self.raw.name))
    }

    /// A field this format requires, or an error naming it.
    fn need<'v>(&self, field: &str, value: &'v Option<String>) -> Result<&'v str, ConfigError> {
        value
            .as_deref()
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| self.invalid(format!("format `{}` needs `{field}`", self.format)))
    }

    /// A field that may be a secret reference (`env:`, `file:`).
    fn secret(&self, field: &str, spec: &str) -> Result<Secret, ConfigError> {
        Secret::resolve(
            &format!("notifications.{}.{field}", self.raw.name),
            spec,
            self.base,
        )
    }

    /// A required http(s) URL, maybe a secret.
    fn url(&self, field: &str, value: &Option<String>) -> Result<Secret, ConfigError> {
        let url = self.secret(field, self.need(field, value)?)?;
        let u = url.expose();
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() > 2048 {
            return Err(self.invalid(format!("{field} must be an http or https URL")));
        }
        Ok(url)
    }
}

/// The entry's [`Destination`]: its format's required fields present, no field of another
/// format given.
pub(super) fn resolve(raw: &RawNotification, base: &Path) -> Result<Destination, ConfigError> {
    let Some(format) = raw.format else {
        let known: Vec<&str> = NotifyFormat::VARIANTS
            .iter()
            .map(|f| <&'static str>::from(*f))
            .collect();
        return Err(ConfigError::Invalid(format!(
            "notification `{}`: needs `format` (one of {})",
            raw.name,
            known.join(", ")
        )));
    };
    let f = Fields { raw, format, base };
    let allowed = takes(format);
    if let Some((field, _)) = specific_fields(raw)
        .into_iter()
        .find(|(field, given)| *given && !allowed.contains(field))
    {
        return Err(f.invalid(format!("format `{format}` takes no `{field}`")));
    }
    let mail_fields = raw.from.is_some() || raw.to.is_some();
    if mail_fields && format != NotifyFormat::Email {
        return Err(f.invalid(format!("format `{format}` takes no `from` or `to`")));
    }
    Ok(match format {
        NotifyFormat::StandardWebhooks => {
            let url = f.url("url", &raw.url)?;
            let key = f.secret("secret", f.need("secret", &raw.secret)?)?;
            super::standard_webhooks_key(key.expose())
                .map_err(|e| f.invalid(format!("secret {e}")))?;
            Destination::StandardWebhooks { url, key }
        }
        NotifyFormat::Slack => Destination::Slack {
            url: f.url("url", &raw.url)?,
        },
        NotifyFormat::Discord => Destination::Discord {
            url: f.url("url", &raw.url)?,
        },
        NotifyFormat::Teams => Destination::Teams {
            url: f.url("url", &raw.url)?,
        },
        NotifyFormat::Ntfy => Destination::Ntfy {
            url: f.url("url", &raw.url)?,
            token: raw
                .token
                .as_deref()
                .map(|t| f.secret("token", t))
                .transpose()?,
        },
        NotifyFormat::Telegram => telegram(&f)?,
        NotifyFormat::Matrix => matrix(&f)?,
        NotifyFormat::Email => Destination::Email(email(&f)?),
    })
}

fn telegram(f: &Fields<'_>) -> Result<Destination, ConfigError> {
    let raw = f.raw;
    let bot_token = f.secret("bot_token", f.need("bot_token", &raw.bot_token)?)?;
    // The token is a path segment: anything else in it would change the request's path.
    if !bot_token
        .expose()
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-'))
    {
        return Err(f.invalid("bot_token has characters a Telegram token never has"));
    }
    let chat_id = f.need("chat_id", &raw.chat_id)?.to_owned();
    let api_url = match &raw.api_url {
        None => "https://api.telegram.org".to_owned(),
        Some(_) => f.url("api_url", &raw.api_url)?.expose().to_owned(),
    };
    Ok(Destination::Telegram {
        api_url: api_url.trim_end_matches('/').to_owned(),
        bot_token,
        chat_id,
    })
}

fn matrix(f: &Fields<'_>) -> Result<Destination, ConfigError> {
    let raw = f.raw;
    let homeserver = f.url("homeserver", &raw.homeserver)?.expose().to_owned();
    let room_id = f.need("room_id", &raw.room_id)?.to_owned();
    if !room_id.starts_with('!') || !room_id.contains(':') {
        return Err(f.invalid("room_id must be a room id like `!abc:example.org`"));
    }
    let access_token = f.secret("access_token", f.need("access_token", &raw.access_token)?)?;
    Ok(Destination::Matrix {
        homeserver: homeserver.trim_end_matches('/').to_owned(),
        room_id,
        access_token,
    })
}

fn email(f: &Fields<'_>) -> Result<EmailChannel, ConfigError> {
    let raw = f.raw;
    let host = f.need("smtp_host", &raw.smtp_host)?.to_owned();
    let tls = raw.smtp_tls.unwrap_or_default();
    let port = raw.smtp_port.unwrap_or(match tls {
        SmtpTls::Starttls => 587,
        SmtpTls::Tls => 465,
    });
    let credentials = match (&raw.smtp_user, &raw.smtp_password) {
        (None, None) => None,
        (Some(u), Some(p)) => Some((u.clone(), f.secret("smtp_password", p)?)),
        (Some(_), None) => return Err(f.invalid("`smtp_user` needs `smtp_password`")),
        (None, Some(_)) => return Err(f.invalid("`smtp_password` needs `smtp_user`")),
    };
    let from = f.need("from", &raw.from)?.to_owned();
    let to = raw.to.clone().unwrap_or_default();
    if to.is_empty() {
        return Err(f.invalid("format `email` needs `to` (one or more addresses)"));
    }
    for a in std::iter::once(&from).chain(&to) {
        a.parse::<lettre::message::Mailbox>()
            .map_err(|_| f.invalid(format!("`{a}` is not an email address")))?;
    }
    let ca_file = raw.smtp_ca.as_ref().map(|p| f.base.join(p));
    if let Some(p) = &ca_file {
        let pem =
            std::fs::read(p).map_err(|e| f.invalid(format!("smtp_ca {}: {e}", p.display())))?;
        lettre::transport::smtp::client::Certificate::from_pem(&pem)
            .map_err(|_| f.invalid(format!("smtp_ca {}: not a PEM certificate", p.display())))?;
    }
    Ok(EmailChannel {
        host,
        port,
        tls,
        credentials,
        ca_file,
        from,
        to,
    })
}
