//! The file's shape, before secrets are resolved and references checked, and the order in
//! which its sections validate themselves: each section in a function of its own (here,
//! `server.rs`, `app.rs` and the modules named after the sections), then the checks that
//! read several sections at once (default polling, secret strength, shared routes).

use super::*;

/// pier.toml: Pier's one configuration file.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// How Pier serves.
    server: super::server::Server,
    /// `pier proxy`'s settings.
    #[serde(default)]
    proxy: super::proxy::RawProxy,
    /// Registries that need settings.
    #[serde(default)]
    registries: Vec<super::server::Registry>,
    /// Webhook senders.
    #[serde(default)]
    sources: Vec<super::source::RawSource>,
    /// What to deploy.
    #[serde(default)]
    apps: Vec<super::app::App>,
    /// How long history is kept.
    #[serde(default)]
    retention: super::retention::RawRetention,
    /// Which host paths each app may mount.
    #[serde(default)]
    policy: super::policy::RawPolicy,
    /// Where deployment outcomes are sent.
    #[serde(default)]
    notifications: Vec<super::notify::RawNotification>,
    /// Where apps run besides the local engine.
    #[serde(default)]
    targets: Vec<super::targets::RawTarget>,
    /// Which keys sign which repositories' images.
    #[serde(default)]
    trust: Vec<super::trust::RawTrust>,
    /// Named admins, who sign in and approve as themselves.
    #[serde(default)]
    admins: Vec<super::gates::RawAdmin>,
}

/// Shortest token or HMAC secret accepted: anything shorter can be guessed or brute-forced
/// from the outside. Standard Webhooks keys are random bytes and may be 24 (its spec's
/// minimum).
const MIN_SECRET: usize = 32;
const MIN_STANDARD_WEBHOOKS_KEY: usize = 24;

fn check_secret_strength(
    admin: Option<&Secret>,
    sources: &[SourceConfig],
) -> Result<(), ConfigError> {
    let short = |what: String, len: usize, min: usize| {
        invalid(format!(
            "{what} is {len} bytes; use at least {min} random bytes \
             (or set server.allow_short_secrets = true for development)"
        ))
    };
    if let Some(t) = admin
        && t.expose().len() < MIN_SECRET
    {
        return Err(short(
            "server.admin_token".into(),
            t.expose().len(),
            MIN_SECRET,
        ));
    }
    for src in sources {
        for t in &src.tokens {
            if t.expose().len() < MIN_SECRET {
                return Err(short(
                    format!("a token of source `{}`", src.name),
                    t.expose().len(),
                    MIN_SECRET,
                ));
            }
        }
        let min = if src.mode == super::SourceMode::StandardWebhooks {
            MIN_STANDARD_WEBHOOKS_KEY
        } else {
            MIN_SECRET
        };
        for k in &src.keys {
            if k.expose().len() < min {
                return Err(short(
                    format!("a secret of source `{}`", src.name),
                    k.expose().len(),
                    min,
                ));
            }
        }
    }
    Ok(())
}

/// Apps may share a proxy address only when their `Host` names tell them apart: at most one
/// app per address takes any host, and no host is claimed twice. An address is TLS for all
/// its apps or for none.
fn check_routes(apps: &[AppConfig]) -> Result<(), ConfigError> {
    let mut seen: Vec<(SocketAddr, Option<&str>, &str)> = Vec::new();
    let mut tls: Vec<(SocketAddr, bool)> = Vec::new();
    for a in apps {
        let Some(r) = &a.route else { continue };
        match tls.iter().find(|(l, _)| *l == r.listen) {
            Some((_, t)) if *t != r.tls.is_some() => {
                return Err(invalid(format!(
                    "app `{}`: {} is TLS for some apps and plain for others",
                    a.name, r.listen
                )));
            }
            Some(_) => {}
            None => tls.push((r.listen, r.tls.is_some())),
        }
        let hosts: Vec<Option<&str>> = if r.hosts.is_empty() {
            vec![None]
        } else {
            r.hosts.iter().map(|h| Some(h.as_str())).collect()
        };
        for h in hosts {
            if let Some((_, _, other)) = seen.iter().find(|(l, oh, _)| *l == r.listen && *oh == h) {
                return Err(invalid(format!(
                    "apps `{other}` and `{}` both route {} on {}",
                    a.name,
                    h.map_or("every host".to_owned(), |h| format!("host {h}")),
                    r.listen
                )));
            }
            seen.push((r.listen, h, &a.name));
        }
    }
    Ok(())
}

impl Config {
    pub(crate) fn resolve(self, base: &Path) -> Result<super::Config, ConfigError> {
        let allow_short = self.server.allow_short_secrets;
        let server = self.server.resolve(base)?;
        let registries = super::server::resolve_registries(self.registries, &server, base)?;
        let targets = super::targets::resolve(self.targets, server.docker_host.as_deref(), base)?;
        let trust = super::trust::resolve(self.trust, base)?;
        let admins = super::gates::resolve_admins(self.admins, base, allow_short)?;
        let known = super::app::Known {
            targets: &targets,
            trust: &trust,
            admins: &admins,
            base,
        };
        let mut apps = super::app::resolve_apps(self.apps, &known)?;
        let sources = resolve_sources(self.sources, &apps, base)?;
        super::server::check_credentials(&registries)?;
        default_polls(&mut apps, &sources);
        check_reserved_source(&sources)?;
        if !allow_short {
            check_secret_strength(server.admin_token.as_ref(), &sources)?;
        }
        check_routes(&apps)?;
        super::ports::check_publishes(&apps)?;
        super::secrets::check_age(&apps, server.age_identity.is_some())?;
        super::gates::check_promotions(&apps)?;
        let notifications = resolve_notifications(
            self.notifications,
            (apps.as_slice(), admins.as_slice()),
            base,
        )?;
        Ok(super::Config {
            admins,
            targets,
            notifications,
            server,
            proxy: self.proxy.resolve(base)?,
            retention: self.retention.resolve()?,
            registries,
            sources,
            apps,
            policy: self.policy.resolve()?,
            trust,
        })
    }
}

/// The `[[sources]]` list: names unique and well-formed; each source checks itself
/// against the registries the apps use.
fn resolve_sources(
    raw: Vec<super::source::RawSource>,
    apps: &[AppConfig],
    base: &Path,
) -> Result<Vec<SourceConfig>, ConfigError> {
    let app_hosts: Vec<&str> = apps.iter().map(|a| a.registry_host()).collect();
    let mut sources: Vec<SourceConfig> = Vec::new();
    for src in raw {
        if !crate::domain::is_name(src.name()) {
            return Err(invalid(format!(
                "source name `{}`: use lower-case letters, digits, - and _",
                src.name()
            )));
        }
        if sources.iter().any(|o| o.name == src.name()) {
            return Err(invalid(format!("source `{}` is defined twice", src.name())));
        }
        sources.push(src.resolve(base, &app_hosts)?);
    }
    Ok(sources)
}

/// An app no source could report a push for is polled by default: without webhooks (or a
/// poll) nothing would ever deploy it. A source with `registry` covers the apps on that
/// host; one without covers every host (its payloads name the host).
fn default_polls(apps: &mut [AppConfig], sources: &[SourceConfig]) {
    for app in apps {
        if app.poll_explicit {
            continue;
        }
        let covered = sources.iter().any(|s| {
            s.registry
                .as_deref()
                .is_none_or(|h| h == app.registry_host())
        });
        if !covered {
            app.poll = Some(super::app::DEFAULT_POLL);
        }
    }
}

/// The poller records its deliveries under its own source name: a configured source of
/// that name would mix webhook deliveries with polled ones.
fn check_reserved_source(sources: &[SourceConfig]) -> Result<(), ConfigError> {
    match sources
        .iter()
        .find(|s| s.name == crate::domain::POLLER_SOURCE)
    {
        Some(s) => Err(invalid(format!(
            "source name `{}` is reserved for the deliveries the poller records",
            s.name
        ))),
        None => Ok(()),
    }
}

/// `[[notifications]]`: each checked against the apps it names; names unique.
fn resolve_notifications(
    raw: Vec<super::notify::RawNotification>,
    known: (&[AppConfig], &[super::NamedAdmin]),
    base: &Path,
) -> Result<Vec<NotificationConfig>, ConfigError> {
    let mut notifications: Vec<NotificationConfig> = Vec::new();
    for n in raw {
        let n = n.resolve(base, known)?;
        if notifications.iter().any(|o| o.name == n.name) {
            return Err(invalid(format!(
                "notification `{}` is defined twice",
                n.name
            )));
        }
        notifications.push(n);
    }
    Ok(notifications)
}
