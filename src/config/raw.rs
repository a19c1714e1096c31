//! The file's shape, before secrets are resolved and references checked.

use super::*;

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_workers() -> usize {
    2
}
fn default_lease() -> Duration {
    Duration::from_secs(30)
}
fn default_sweep() -> Duration {
    Duration::from_secs(30)
}
fn default_max_body() -> String {
    "1m".into()
}
fn default_tag() -> String {
    "latest".into()
}
/// How often an app that no webhook source covers is polled by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);
/// The shortest poll interval: anything shorter is a busy loop against someone's registry.
const MIN_POLL: Duration = Duration::from_secs(1);

/// `poll`: `None` (the default for the app), `Some(None)` (off), `Some(Some(every))`.
fn parse_poll(app: &str, text: Option<&str>) -> Result<Option<Option<Duration>>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    if text.trim() == "off" {
        return Ok(Some(None));
    }
    let every = humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(format!(
            "app `{app}`: poll `{text}` is neither \"off\" nor a duration such as \"5m\": {e}"
        ))
    })?;
    if every < MIN_POLL {
        return Err(invalid(format!("app `{app}`: poll must be at least 1s")));
    }
    Ok(Some(Some(every)))
}
fn default_health_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(10)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    server: Server,
    #[serde(default)]
    proxy: super::proxy::RawProxy,
    #[serde(default)]
    registries: Vec<Registry>,
    #[serde(default)]
    sources: Vec<super::source::RawSource>,
    #[serde(default)]
    apps: Vec<App>,
    /// Issue 12: how long history is kept.
    #[serde(default)]
    retention: super::retention::RawRetention,
    /// Issue 10: which host paths each app may mount.
    #[serde(default)]
    policy: super::policy::RawPolicy,
    #[serde(default)]
    notifications: Vec<super::notify::RawNotification>,
    /// Issue 23: where apps run (see `targets.rs`).
    #[serde(default)]
    targets: Vec<super::targets::RawTarget>,
    /// Issue 25: which keys sign which repositories' images.
    #[serde(default)]
    trust: Vec<super::trust::RawTrust>,
    /// Issue 26: named admins, who sign in and approve as themselves (see `gates.rs`).
    #[serde(default)]
    admins: Vec<super::gates::RawAdmin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Server {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    /// One Postgres URL; it may name several hosts, libpq style (issue 28).
    database_url: Option<String>,
    /// Or a list of them: Pier uses the one that accepts writes.
    #[serde(default)]
    database_urls: Vec<String>,
    admin_token: Option<String>,
    docker_host: Option<String>,
    #[serde(default = "default_workers")]
    workers: usize,
    #[serde(default = "default_lease", with = "humantime_serde")]
    lease: Duration,
    #[serde(default = "default_sweep", with = "humantime_serde")]
    sweep_interval: Duration,
    #[serde(default = "default_max_body")]
    max_body: String,
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    header_timeout: Duration,
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    request_timeout: Duration,
    #[serde(default = "default_max_connections")]
    max_connections: usize,
    #[serde(default = "default_webhook_buffer")]
    webhook_buffer: String,
    /// Development only: accept tokens and secrets shorter than [`MIN_SECRET`].
    #[serde(default)]
    allow_short_secrets: bool,
    #[serde(default, with = "humantime_serde")]
    registry_connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    registry_first_byte_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    registry_timeout: Option<Duration>,
    max_manifest: Option<String>,
    #[serde(default = "default_retry_budget", with = "humantime_serde")]
    retry_budget: Duration,
    app_subnets: Option<String>,
    /// Peers (CIDRs) whose forwarding header names the client (src/config/trusted.rs).
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    client_ip_header: super::trusted::ClientIpHeader,
    // Sign-in to the status page (src/config/signin.rs).
    public_url: Option<String>,
    admin_password_hash: Option<String>,
    #[serde(default, with = "humantime_serde")]
    session_ttl: Option<Duration>,
    pages_need_sign_in: Option<bool>,
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

fn default_webhook_buffer() -> String {
    "16m".into()
}

fn default_retry_budget() -> Duration {
    Duration::from_secs(120)
}

/// A registry's limits: each field given overrides `base`; every result is checked.
fn registry_limits(
    what: &str,
    base: RegistryLimits,
    connect: Option<Duration>,
    first_byte: Option<Duration>,
    whole: Option<Duration>,
    max_manifest: Option<&str>,
) -> Result<RegistryLimits, ConfigError> {
    let limits = RegistryLimits {
        connect_timeout: connect.unwrap_or(base.connect_timeout),
        first_byte_timeout: first_byte.unwrap_or(base.first_byte_timeout),
        timeout: whole.unwrap_or(base.timeout),
        max_manifest_bytes: match max_manifest {
            Some(m) => {
                parse_bytes(m).map_err(|e| invalid(format!("{what}: max_manifest: {e}")))? as usize
            }
            None => base.max_manifest_bytes,
        },
    };
    if limits.connect_timeout.is_zero()
        || limits.first_byte_timeout.is_zero()
        || limits.timeout.is_zero()
    {
        return Err(invalid(format!(
            "{what}: registry timeouts must be above zero"
        )));
    }
    if !(1 << 10..=64 << 20).contains(&limits.max_manifest_bytes) {
        return Err(invalid(format!(
            "{what}: max_manifest must be between 1k and 64m"
        )));
    }
    Ok(limits)
}

fn default_header_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_connections() -> usize {
    1024
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Registry {
    host: String,
    #[serde(default)]
    insecure: bool,
    username: Option<String>,
    password: Option<String>,
    #[serde(default, with = "humantime_serde")]
    connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    first_byte_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    max_manifest: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Health {
    path: String,
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    timeout: Duration,
    /// Fields the JSON body must have, e.g. `{ status = "UP" }`.
    #[serde(default)]
    json: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct App {
    name: String,
    image: String,
    /// An exact tag, or a glob (`v1.*`); default `latest` unless `versions` is set.
    tag: Option<String>,
    /// A semver range (`>=1.2, <2`): the highest matching version deploys.
    versions: Option<String>,
    /// `"off"`, or how often to ask the registry what the app's tags name (`"5m"`).
    poll: Option<String>,
    port: u16,
    publish: Option<SocketAddr>,
    /// Acknowledges a `publish` on every interface (`0.0.0.0`, `[::]`); see `contained.rs`.
    #[serde(default)]
    publish_public: bool,
    health: Option<Health>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    memory: Option<String>,
    cpus: Option<f64>,
    #[serde(default)]
    restart: RestartPolicy,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    stop_timeout: Duration,
    #[serde(default = "default_true")]
    no_new_privileges: bool,
    #[serde(default = "default_pids_limit")]
    pids_limit: i64,
    route: Option<super::proxy::RawRoute>,
    // Issue 10 (contained apps): see `contained.rs`.
    service: Option<String>,
    #[serde(default)]
    networks: Vec<String>,
    #[serde(default)]
    volumes: Vec<super::contained::RawVolume>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    #[serde(default)]
    files: Vec<super::contained::RawHostMount>,
    #[serde(default)]
    binds: Vec<super::contained::RawHostMount>,
    #[serde(default)]
    devices: Vec<String>,
    cap_keep: Option<Vec<String>>,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    tmpfs: Vec<super::tmpfs::RawTmpfs>,
    user: Option<String>,
    port_env: Option<String>,
    /// Replaces the image's entrypoint and command: the program, then its arguments.
    command: Option<Vec<String>>,
    /// The app's further services (`[apps.services.worker]`), see `services.rs`.
    #[serde(default)]
    services: BTreeMap<String, super::services::RawService>,
    /// The targets the app runs on (default `["local"]`) and how a rollout crosses them.
    targets: Option<Vec<String>>,
    rollout: Option<super::targets::RawRollout>,
    /// Issue 25: the image must be signed by a key of a `[[trust]]` entry covering it;
    /// default: as the covering entries say.
    require_signature: Option<bool>,
    /// Issue 26: approvals and deploy windows (see `gates.rs`).
    approval: Option<super::gates::RawApproval>,
    #[serde(default)]
    windows: Vec<String>,
    promote_from: Option<String>,
    after: Option<String>,
    /// Issue 24: the service of an app on a `kind = "swarm"` target, see `swarm.rs`.
    swarm: Option<super::swarm::RawSwarm>,
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

fn default_true() -> bool {
    true
}
/// Enough for a JVM's threads; a fork bomb stops here instead of at the host's limit.
fn default_pids_limit() -> i64 {
    DEFAULT_PIDS_LIMIT
}
pub(super) const DEFAULT_PIDS_LIMIT: i64 = 4096;

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// `server.database_url` or `server.database_urls`, exactly one of them; each entry may be
/// `env:` or `file:` like any secret. The URLs themselves (and how many hosts they name)
/// are read by the store when Pier connects.
fn database_urls(
    one: Option<&str>,
    many: &[String],
    base: &Path,
) -> Result<Vec<Secret>, ConfigError> {
    match (one, many.is_empty()) {
        (Some(url), true) => Ok(vec![Secret::resolve("server.database_url", url, base)?]),
        (None, false) => many
            .iter()
            .enumerate()
            .map(|(i, url)| Secret::resolve(&format!("server.database_urls[{i}]"), url, base))
            .collect(),
        (Some(_), false) => Err(invalid(
            "server.database_url and server.database_urls: give one of them, not both",
        )),
        (None, true) => Err(invalid(
            "server.database_url (or server.database_urls) is required",
        )),
    }
}

impl Config {
    pub fn resolve(self, base: &Path) -> Result<super::Config, ConfigError> {
        let s = self.server;
        let s_allow_short = s.allow_short_secrets;
        if s.workers == 0 {
            return Err(invalid("server.workers must be at least 1"));
        }
        if s.lease < Duration::from_secs(3) {
            return Err(invalid("server.lease must be at least 3s"));
        }
        let server = ServerConfig {
            listen: s.listen,
            database: database_urls(s.database_url.as_deref(), &s.database_urls, base)?,
            admin_token: s
                .admin_token
                .map(|t| Secret::resolve("server.admin_token", &t, base))
                .transpose()?
                .filter(|t| !t.expose().is_empty()),
            docker_host: s.docker_host,
            workers: s.workers,
            lease: s.lease,
            sweep_interval: s.sweep_interval,
            max_body_bytes: parse_bytes(&s.max_body)
                .map_err(|e| invalid(format!("server.max_body: {e}")))?
                as usize,
            header_timeout: s.header_timeout,
            request_timeout: s.request_timeout,
            max_connections: s.max_connections,
            webhook_buffer_bytes: parse_bytes(&s.webhook_buffer)
                .map_err(|e| invalid(format!("server.webhook_buffer: {e}")))?
                as usize,
            registry_limits: registry_limits(
                "server",
                RegistryLimits::default(),
                s.registry_connect_timeout,
                s.registry_first_byte_timeout,
                s.registry_timeout,
                s.max_manifest.as_deref(),
            )?,
            retry_budget: s.retry_budget,
            app_subnets: s
                .app_subnets
                .as_deref()
                .map(super::SubnetPool::parse)
                .transpose()
                .map_err(|e| invalid(format!("server.app_subnets: {e}")))?,
            trusted_proxies: super::TrustedProxies::parse(&s.trusted_proxies, s.client_ip_header)
                .map_err(|e| invalid(format!("server.trusted_proxies: {e}")))?,
            sign_in: super::signin::RawSignIn {
                public_url: s.public_url,
                admin_password_hash: s.admin_password_hash,
                session_ttl: s.session_ttl,
                pages_need_sign_in: s.pages_need_sign_in,
            }
            .resolve(s.listen, base)?,
        };
        if server.header_timeout.is_zero() || server.request_timeout.is_zero() {
            return Err(invalid(
                "server.header_timeout and server.request_timeout must be above zero",
            ));
        }
        if server.max_connections == 0 {
            return Err(invalid("server.max_connections must be at least 1"));
        }
        if server.retry_budget.is_zero() {
            return Err(invalid("server.retry_budget must be above zero"));
        }

        let mut registries = Vec::new();
        for r in self.registries {
            let what = format!("registries[{}].password", r.host);
            let limits = registry_limits(
                &format!("registries[{}]", r.host),
                server.registry_limits,
                r.connect_timeout,
                r.first_byte_timeout,
                r.timeout,
                r.max_manifest.as_deref(),
            )?;
            registries.push(RegistryConfig {
                limits,
                password: r
                    .password
                    .map(|p| Secret::resolve(&what, &p, base))
                    .transpose()?,
                host: r.host,
                insecure: r.insecure,
                username: r.username,
            });
        }

        let targets = super::targets::resolve(self.targets, server.docker_host.as_deref(), base)?;
        let trust = super::trust::resolve(self.trust, base)?;
        let admins = super::gates::resolve_admins(self.admins, base, s_allow_short)?;
        let mut apps: Vec<AppConfig> = Vec::new();
        for a in self.apps {
            if !valid_name(&a.name) {
                return Err(invalid(format!(
                    "app name `{}`: use lower-case letters, digits, - and _",
                    a.name
                )));
            }
            if apps.iter().any(|o| o.name == a.name) {
                return Err(invalid(format!("app `{}` is defined twice", a.name)));
            }
            let image_name = crate::domain::image::ImageName::parse(&a.image)
                .map_err(|e| invalid(format!("app `{}`: image {e}", a.name)))?;
            let route = a.route.map(|r| r.resolve(&a.name, base)).transpose()?;
            match (a.strategy, &route, a.publish) {
                (Strategy::BlueGreen, None, _) => {
                    return Err(invalid(format!(
                        "app `{}`: blue-green needs a [apps.route] for Pier's proxy",
                        a.name
                    )));
                }
                (Strategy::BlueGreen, _, Some(_)) => {
                    return Err(invalid(format!(
                        "app `{}`: a blue-green app has no `publish`: each generation gets an \
                         ephemeral loopback port and clients come through the proxy's `route.listen`",
                        a.name
                    )));
                }
                (Strategy::Recreate, Some(_), _) => {
                    return Err(invalid(format!(
                        "app `{}`: [apps.route] is for strategy = \"blue-green\"",
                        a.name
                    )));
                }
                _ => {}
            }
            super::contained::check_publish(&a.name, a.publish, a.publish_public)?;
            let on_swarm = super::swarm::names_swarm(a.targets.as_deref(), &targets);
            if a.health.is_some()
                && a.publish.is_none()
                && a.strategy == Strategy::Recreate
                && !on_swarm
            {
                return Err(invalid(format!(
                    "app `{}`: an HTTP health check needs `publish`",
                    a.name
                )));
            }
            if let Some(h) = &a.health
                && !h.path.starts_with('/')
            {
                return Err(invalid(format!(
                    "app `{}`: health.path must start with /",
                    a.name
                )));
            }
            if let Some(c) = a.cpus
                && !(c > 0.0 && c <= 1024.0)
            {
                return Err(invalid(format!("app `{}`: cpus must be > 0", a.name)));
            }
            let mut env = BTreeMap::new();
            for (k, v) in a.env {
                let what = format!("apps.{}.env.{k}", a.name);
                env.insert(k, Secret::resolve(&what, &v, base)?);
            }
            let contained = super::contained::RawContained {
                service: a.service,
                networks: a.networks,
                volumes: a.volumes,
                secrets: a.secrets,
                files: a.files,
                binds: a.binds,
                devices: a.devices,
                cap_keep: a.cap_keep,
                read_only: a.read_only,
                tmpfs: a.tmpfs,
                user: a.user,
                port_env: a.port_env,
            }
            .resolve(&a.name, &env, base)?;
            let rule = match (&a.tag, &a.versions) {
                (Some(_), Some(_)) => {
                    return Err(invalid(format!(
                        "app `{}`: give `tag` (exact or glob) or `versions` (a semver range), not both",
                        a.name
                    )));
                }
                (_, Some(v)) => TagRule::from_versions(v),
                (Some(t), None) => TagRule::from_tag(t),
                (None, None) => TagRule::from_tag(&default_tag()),
            }
            .map_err(|e| invalid(format!("app `{}`: {e}", a.name)))?;
            let poll = parse_poll(&a.name, a.poll.as_deref())?;
            let memory_bytes = a
                .memory
                .map(|m| parse_bytes(&m))
                .transpose()
                .map_err(|e| invalid(format!("app `{}`: memory: {e}", a.name)))?;
            let command = super::services::command(&a.name, "", a.command)?;
            let app_targets = super::targets::app_targets(&a.name, a.targets, &targets)?;
            let rollout = a
                .rollout
                .map(|r| r.resolve(&a.name))
                .transpose()?
                .unwrap_or_default();
            let gates = super::gates::RawGates {
                approval: a.approval,
                windows: a.windows,
                promote_from: a.promote_from,
                after: a.after,
            }
            .resolve(&a.name, &admins)?;
            let mut app = AppConfig {
                gates,
                name: a.name,
                image: a.image,
                image_name,
                tag: rule.text().to_owned(),
                rule,
                poll: poll.unwrap_or(None),
                poll_explicit: poll.is_some(),
                port: a.port,
                publish: a.publish,
                publish_public: a.publish_public,
                health: a.health.map(|h| HealthConfig {
                    path: h.path,
                    timeout: h.timeout,
                    json: h.json,
                }),
                env,
                memory_bytes,
                cpus: a.cpus,
                restart: a.restart,
                strategy: a.strategy,
                stop_timeout: a.stop_timeout,
                no_new_privileges: a.no_new_privileges,
                pids_limit: (a.pids_limit > 0).then_some(a.pids_limit),
                route,
                contained,
                command,
                settle: super::services::DEFAULT_SETTLE,
                services: vec![],
                targets: app_targets,
                rollout,
                signature: None,
                swarm: None,
            };
            if app.gates.promotion.is_some() {
                // Issue 26: only promotions deploy it; no push, no poll.
                app.poll = None;
                app.poll_explicit = true;
            }
            app.services = super::services::resolve(&app, a.services, base)?;
            app.signature = super::trust::for_app(&app, a.require_signature, &trust)?;
            app.swarm = super::swarm::resolve(&app, a.swarm, &targets)?;
            apps.push(app);
        }
        let app_hosts: Vec<&str> = apps.iter().map(|a| a.registry_host()).collect();
        let mut sources: Vec<SourceConfig> = Vec::new();
        for src in self.sources {
            if !valid_name(src.name()) {
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
        for r in &registries {
            if r.username.is_some() != r.password.is_some() {
                return Err(invalid(format!(
                    "registry `{}`: give both username and password, or neither",
                    r.host
                )));
            }
        }
        // An app no source could report a push for is polled by default: without webhooks
        // (or a poll) nothing would ever deploy it. A source with `registry` covers the
        // apps on that host; one without covers every host (its payloads name the host).
        for app in &mut apps {
            if app.poll_explicit {
                continue;
            }
            let covered = sources.iter().any(|s| {
                s.registry
                    .as_deref()
                    .is_none_or(|h| h == app.registry_host())
            });
            if !covered {
                app.poll = Some(DEFAULT_POLL);
            }
        }
        if let Some(s) = sources
            .iter()
            .find(|s| s.name == crate::domain::POLLER_SOURCE)
        {
            return Err(invalid(format!(
                "source name `{}` is reserved for the deliveries the poller records",
                s.name
            )));
        }
        if !s_allow_short {
            check_secret_strength(server.admin_token.as_ref(), &sources)?;
        }
        check_routes(&apps)?;
        super::gates::check_promotions(&apps)?;
        let mut notifications: Vec<NotificationConfig> = Vec::new();
        for n in self.notifications {
            let n = n.resolve(base, &apps)?;
            if notifications.iter().any(|o| o.name == n.name) {
                return Err(invalid(format!(
                    "notification `{}` is defined twice",
                    n.name
                )));
            }
            notifications.push(n);
        }
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
