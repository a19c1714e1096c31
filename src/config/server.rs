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

/// How Pier serves: its HTTP server and its limits, the database, the workers, the shared
/// admin token, sign-in to the status page, and the defaults of every registry's deadlines.
/// Only `pier serve` (and `worker`, `proxy`, `check`) read it; these settings keep their
/// start-up values until a restart, whatever a reload says.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Server {
    /// Address and port of the HTTP server: webhooks (`/hooks/{source}`), the status pages,
    /// the JSON API, `/healthz`, `/readyz` and `/metrics`. Use `0.0.0.0:8080`, behind a TLS
    /// proxy, when registries on other machines or in containers must reach it.
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    /// Postgres URL, e.g. `postgres://pier:pier@127.0.0.1:5432/pier`: Pier's only state. It
    /// may name several hosts, libpq style
    /// (`postgres://pier@db1:5432,db2:5432/pier?target_session_attrs=read-write`): Pier
    /// uses the one that accepts writes and moves when it stops doing so (see Database and
    /// failover). One of `database_url` and `database_urls` is required.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    database_url: Option<String>,
    /// Instead of `database_url`: several URLs, each of which may name several hosts; at
    /// most 8 hosts in all, tried in this order.
    #[serde(default)]
    #[schemars(with = "Vec<super::doc_types::SecretText>")]
    database_urls: Vec<String>,
    /// The shared admin token: it signs an admin in on the status page and is a bearer
    /// token of the JSON API and the CLI (`PIER_TOKEN`), recorded as `api token`; it cannot
    /// approve. Unset or empty, with no named admin's token: the pages are read-only. At
    /// least 32 bytes.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    admin_token: Option<String>,
    /// The Docker Engine of the `local` target, `unix://…` or `tcp://…`.
    ///
    /// Default: `$DOCKER_HOST`, else the local socket.
    docker_host: Option<String>,
    /// Deployments this process runs at once (each app still has at most one running at a
    /// time). At least 1.
    #[serde(default = "default_workers")]
    workers: usize,
    /// The fence on a worker's claim: renewed every third of it; once it expired, another
    /// worker may take the deployment over even if its holder is alive but cut off from the
    /// database. A holder whose process died is taken over at once, without waiting for its
    /// lease. At least `3s`.
    #[serde(default = "default_lease", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    lease: Duration,
    /// How often Pier reconciles, prunes history and looks at the queue besides
    /// LISTEN/NOTIFY wake-ups; an idle Pier sends no query in between.
    #[serde(default = "default_sweep", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    sweep_interval: Duration,
    /// How often each running container's resource use (CPU, memory, network, block I/O,
    /// restarts) is sampled, while a page, the API or a scrape wants it, or a deployment
    /// just succeeded; `1s` to `10m`.
    #[serde(default = "default_stats_interval", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    stats_interval: Duration,
    /// Largest webhook body; a larger one gets `413`, at once when `Content-Length` already
    /// says so.
    #[serde(default = "default_max_body")]
    #[schemars(with = "super::doc_types::SizeText")]
    max_body: String,
    /// A client's whole request head, and how long a kept-alive connection may sit idle;
    /// then it is closed.
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    header_timeout: Duration,
    /// A whole request, body included; a body still trickling then is cut off with `408`.
    /// The long-poll `GET /api/deployments/{id}?wait=` gets 120 s more.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    request_timeout: Duration,
    /// HTTP connections open at once; more wait in the kernel's backlog.
    #[serde(default = "default_max_connections")]
    max_connections: usize,
    /// Webhook body bytes held in memory at once, all requests together; beyond it a
    /// webhook gets `503` (senders retry).
    #[serde(default = "default_webhook_buffer")]
    #[schemars(with = "super::doc_types::SizeText")]
    webhook_buffer: String,
    /// Development only: accept tokens and secrets shorter than 32 bytes (24 for Standard
    /// Webhooks keys). Otherwise Pier refuses to start with them.
    #[serde(default)]
    pub(super) allow_short_secrets: bool,
    /// Opening a connection (TCP and TLS) to a registry or its token service. The default
    /// of every registry; a `[[registries]]` entry may set its own.
    ///
    /// Default: `"5s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    registry_connect_timeout: Option<Duration>,
    /// From a request to a registry to the first byte of its answer, and the longest pause
    /// between two reads of the body.
    ///
    /// Default: `"10s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    registry_first_byte_timeout: Option<Duration>,
    /// From a request to a registry to the last byte of its answer, however slowly it
    /// trickles.
    ///
    /// Default: `"30s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    registry_timeout: Option<Duration>,
    /// Largest manifest or index, `1k` to `64m`. Pier stops reading at the cap (or refuses
    /// at once when `Content-Length` says more) and fails the deployment naming the cap.
    ///
    /// Default: `"4m"`.
    #[schemars(with = "Option<super::doc_types::SizeText>")]
    max_manifest: Option<String>,
    /// How long a step retries transient errors (a registry or engine unreachable, a
    /// registry's 5xx or 429, a registry deadline passed) before the deployment fails. A
    /// registry's `Retry-After` is honoured within it; one asking to wait past it fails the
    /// step at once.
    #[serde(default = "default_retry_budget", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    retry_budget: Duration,
    /// One pull (or `pier import`'s load) as a whole, its progress stream included; past it
    /// the attempt fails as transient and `retry_budget` decides whether another one
    /// starts. Every other engine call has a fixed deadline of its kind.
    #[serde(default = "default_pull_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    pull_timeout: Duration,
    /// An IPv4 range apps' private networks get their addresses from: each app a `/27` of
    /// it (a `/16` holds 2048), skipping subnets another network on the engine uses.
    /// Without it the engine's default pools are used, which hold about 30 networks, and
    /// the 31st app's `network` step fails with a message naming this setting.
    app_subnets: Option<String>,
    /// Proxies in front of Pier (a TLS terminator) whose forwarding header names the
    /// client, as CIDRs or addresses, e.g. `["127.0.0.1", "10.0.0.0/8"]`. The failure
    /// brakes and the logs then see each sender's own address instead of the proxy's; a
    /// request from any other peer is taken as from that peer, whatever it writes.
    #[serde(default)]
    trusted_proxies: Vec<String>,
    /// The header the trusted proxies write the client into. Only this one is read, so a
    /// header the proxy passes through untouched cannot name a client.
    #[serde(default)]
    client_ip_header: super::trusted::ClientIpHeader,
    /// The X25519 identity (`AGE-SECRET-KEY-1…`, as `age-keygen` writes it) that decrypts
    /// apps' `age:PATH#KEY` secrets, as `"env:NAME"` or `"file:PATH"`. Read at start-up
    /// (a new identity takes a restart); the age files themselves are read at each
    /// deployment, so a rotated secret needs neither.
    ///
    /// Default: none (an app with an `age:` secret is refused).
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    age_identity: Option<String>,
    /// The directory, on the engine host and on a tmpfs there, under which each container's
    /// secret files (`as = "file"`) live: `<secrets_dir>/<container name>/KEY`, bound at
    /// `/run/secrets`. The engine creates it (root, 0755); the files are written by the
    /// engine, mode 0400, owned by the app's user. An absolute path.
    ///
    /// Default: `"/run/pier-secrets"`.
    #[serde(default = "default_secrets_dir")]
    secrets_dir: String,
    // Sign-in to the status page (src/config/signin.rs).
    /// Where browsers reach Pier: an origin only (`https://pier.example.com`, no path).
    /// Forms posted from it are trusted by the cross-site check; with `https` the session
    /// cookie is `Secure` and named `__Host-pier_session`.
    ///
    /// Default: `http://{listen}`.
    public_url: Option<String>,
    /// A password that signs in besides `admin_token`: its argon2 (`$argon2id$…`) or bcrypt
    /// (`$2b$…`) hash, never the password itself (a plain password is refused at start-up).
    /// `printf %s 'pw' | argon2 "$(openssl rand -hex 16)" -id -e` (Debian package `argon2`)
    /// makes one.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    admin_password_hash: Option<String>,
    /// How long a sign-in lasts, `1m` to `30d`.
    ///
    /// Default: `"12h"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    session_ttl: Option<Duration>,
    /// Whether the read-only pages (apps, deployments, deliveries) need a session too; the
    /// JSON API keeps its bearer token either way.
    ///
    /// Default: `true` unless `public_url` is a loopback address.
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
            age_identity: age_identity(self.age_identity.as_deref(), base)?,
            secrets_dir: super::contained::absolute("server.secrets_dir", &self.secrets_dir)?,
        };
        check_timeouts(&server)?;
        Ok(server)
    }
}

fn default_secrets_dir() -> String {
    "/run/pier-secrets".to_owned()
}

/// The identity, checked to be one now rather than at the first deployment that needs it.
fn age_identity(spec: Option<&str>, base: &Path) -> Result<Option<Secret>, ConfigError> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let id = Secret::resolve("server.age_identity", spec, base)?;
    super::age::identity(id.expose()).map_err(|e| invalid(format!("server.age_identity: {e}")))?;
    Ok(Some(id))
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

/// A registry that needs settings: credentials, plain HTTP, its own deadlines. A registry
/// an app names without an entry is used over HTTPS, anonymously, with `[server]`'s limits.
/// Pier resolves tags with its own small client (anonymous, Basic, or the Bearer token
/// service the registry names in its `WWW-Authenticate` challenge), follows at most 5
/// redirects and only to `http`/`https` (never from `https` down to `http`), and checks
/// that `Docker-Content-Digest` is the SHA-256 of the bytes it read.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Registry {
    /// The registry host exactly as apps' `image` names it, with its port:
    /// `127.0.0.1:5000`, `ghcr.io`; `docker.io` for Docker Hub.
    host: String,
    /// Plain HTTP instead of HTTPS: for a registry on this machine or a trusted network
    /// only.
    #[serde(default)]
    insecure: bool,
    /// User for resolving and pulling; give `password` too.
    username: Option<String>,
    /// Password or access token; give `username` too.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    password: Option<String>,
    /// This registry's own `registry_connect_timeout`.
    ///
    /// Default: `[server]`'s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    connect_timeout: Option<Duration>,
    /// This registry's own `registry_first_byte_timeout`.
    ///
    /// Default: `[server]`'s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    first_byte_timeout: Option<Duration>,
    /// This registry's own `registry_timeout`.
    ///
    /// Default: `[server]`'s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    timeout: Option<Duration>,
    /// This registry's own `max_manifest`.
    ///
    /// Default: `[server]`'s.
    #[schemars(with = "Option<super::doc_types::SizeText>")]
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
