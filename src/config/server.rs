//! `[server]` and `[[registries]]` as written, and how each validates itself: every count,
//! timeout and size is checked here, so that a zero that would stall the worker or the
//! proxy fails at load instead of at the first webhook.

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
fn default_stats_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_max_body() -> String {
    "1m".into()
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
fn default_webhook_buffer() -> String {
    "16m".into()
}
fn default_retry_budget() -> Duration {
    Duration::from_secs(120)
}
fn default_pull_timeout() -> Duration {
    Duration::from_secs(15 * 60)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Server {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    /// One Postgres URL; it may name several hosts, libpq style.
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
    /// One sample of each running container's resource use per this, while wanted.
    #[serde(default = "default_stats_interval", with = "humantime_serde")]
    stats_interval: Duration,
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
    /// Development only: accept tokens and secrets shorter than `raw::MIN_SECRET`.
    #[serde(default)]
    pub(super) allow_short_secrets: bool,
    #[serde(default, with = "humantime_serde")]
    registry_connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    registry_first_byte_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    registry_timeout: Option<Duration>,
    max_manifest: Option<String>,
    #[serde(default = "default_retry_budget", with = "humantime_serde")]
    retry_budget: Duration,
    #[serde(default = "default_pull_timeout", with = "humantime_serde")]
    pull_timeout: Duration,
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

impl Server {
    /// The section, resolved and checked. The counts are checked before anything is
    /// resolved, the timeouts after, in the order errors have always been reported.
    pub(super) fn resolve(self, base: &Path) -> Result<ServerConfig, ConfigError> {
        if self.workers == 0 {
            return Err(invalid("server.workers must be at least 1"));
        }
        if self.lease < Duration::from_secs(3) {
            return Err(invalid("server.lease must be at least 3s"));
        }
        let server = ServerConfig {
            listen: self.listen,
            database: database_urls(self.database_url.as_deref(), &self.database_urls, base)?,
            admin_token: self
                .admin_token
                .map(|t| Secret::resolve("server.admin_token", &t, base))
                .transpose()?
                .filter(|t| !t.expose().is_empty()),
            docker_host: self.docker_host,
            workers: self.workers,
            lease: self.lease,
            sweep_interval: self.sweep_interval,
            stats_interval: self.stats_interval,
            max_body_bytes: size("server.max_body", &self.max_body)?,
            header_timeout: self.header_timeout,
            request_timeout: self.request_timeout,
            max_connections: self.max_connections,
            webhook_buffer_bytes: size("server.webhook_buffer", &self.webhook_buffer)?,
            registry_limits: registry_limits(
                "server",
                RegistryLimits::default(),
                self.registry_connect_timeout,
                self.registry_first_byte_timeout,
                self.registry_timeout,
                self.max_manifest.as_deref(),
            )?,
            retry_budget: self.retry_budget,
            pull_timeout: self.pull_timeout,
            app_subnets: self
                .app_subnets
                .as_deref()
                .map(super::SubnetPool::parse)
                .transpose()
                .map_err(|e| invalid(format!("server.app_subnets: {e}")))?,
            trusted_proxies: TrustedProxies::parse(&self.trusted_proxies, self.client_ip_header)
                .map_err(|e| invalid(format!("server.trusted_proxies: {e}")))?,
            sign_in: super::signin::RawSignIn {
                public_url: self.public_url,
                admin_password_hash: self.admin_password_hash,
                session_ttl: self.session_ttl,
                pages_need_sign_in: self.pages_need_sign_in,
            }
            .resolve(self.listen, base)?,
        };
        check_timeouts(&server)?;
        Ok(server)
    }
}

/// A zero here would make every request time out at once, or accept no connection.
fn check_timeouts(server: &ServerConfig) -> Result<(), ConfigError> {
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
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&server.stats_interval) {
        return Err(invalid("server.stats_interval must be between 1s and 10m"));
    }
    if server.pull_timeout.is_zero() {
        return Err(invalid("server.pull_timeout must be above zero"));
    }
    Ok(())
}

/// A size field in bytes, its error naming the field.
fn size(field: &str, text: &str) -> Result<usize, ConfigError> {
    parse_bytes(text)
        .map(|n| n as usize)
        .map_err(|e| invalid(format!("{field}: {e}")))
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
            Some(m) => size(&format!("{what}: max_manifest"), m)?,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Registry {
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

impl Registry {
    /// One `[[registries]]` entry; its limits default to the server's.
    fn resolve(self, server: &ServerConfig, base: &Path) -> Result<RegistryConfig, ConfigError> {
        let what = format!("registries[{}].password", self.host);
        let limits = registry_limits(
            &format!("registries[{}]", self.host),
            server.registry_limits,
            self.connect_timeout,
            self.first_byte_timeout,
            self.timeout,
            self.max_manifest.as_deref(),
        )?;
        Ok(RegistryConfig {
            limits,
            password: self
                .password
                .map(|p| Secret::resolve(&what, &p, base))
                .transpose()?,
            host: self.host,
            insecure: self.insecure,
            username: self.username,
        })
    }
}

pub(super) fn resolve_registries(
    raw: Vec<Registry>,
    server: &ServerConfig,
    base: &Path,
) -> Result<Vec<RegistryConfig>, ConfigError> {
    raw.into_iter().map(|r| r.resolve(server, base)).collect()
}

/// Checked after the apps and sources (as it always was): a username without a password
/// would send a login the registry can only refuse.
pub(super) fn check_credentials(registries: &[RegistryConfig]) -> Result<(), ConfigError> {
    for r in registries {
        if r.username.is_some() != r.password.is_some() {
            return Err(invalid(format!(
                "registry `{}`: give both username and password, or neither",
                r.host
            )));
        }
    }
    Ok(())
}
