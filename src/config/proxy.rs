//! `[proxy]` and an app's `[apps.route]`: where Pier's own proxy listens, which requests go
//! to which app, and how a blue-green switch drains and soaks.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ClientIpHeader, ConfigError, TrustedProxies, parse_bytes};

/// `pier proxy`, the public address of blue-green apps and the health prober of remote
/// engines: its own process, run with the same file (`pier --config pier.toml proxy`).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProxy {
    /// The proxy's admin endpoint (loopback only): `GET /routes` shows which route each app
    /// serves and what is in flight; `pier serve` waits on it while it switches a
    /// blue-green app.
    #[serde(default = "default_admin")]
    admin: SocketAddr,
    /// The last routes the proxy knew, so that a proxy restarted while the database is away
    /// serves them. Relative to the config file.
    ///
    /// Default: `"pier-proxy-routes.json"`.
    state_file: Option<PathBuf>,
    /// Full re-read of the routes besides LISTEN/NOTIFY.
    #[serde(default = "default_refresh", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    refresh: Duration,
    /// Threads `pier proxy` serves with; `0` is one per core, `1` a single event loop.
    #[serde(default)]
    threads: usize,
    /// Peers in front of the proxy (a load balancer, a CDN), as CIDRs or addresses, whose
    /// `X-Forwarded-For` is appended to and whose `X-Forwarded-Proto` is kept; from any
    /// other peer Pier writes both itself.
    #[serde(default)]
    trusted_proxies: Vec<String>,
    /// Connections open at once from the proxy to one app, across its generations; a
    /// request that finds none free within 2 s gets 503.
    #[serde(default = "default_max_upstream")]
    max_upstream_connections: usize,
    /// After SIGTERM, how long requests in flight get to finish before `pier proxy` exits.
    #[serde(default = "default_proxy_drain", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    drain_timeout: Duration,
    /// The target whose routes this proxy serves; `pier proxy --target NAME` overrides it
    /// (one proxy per host, beside that host's engine).
    ///
    /// Default: `"local"`.
    target: Option<String>,
}

impl Default for RawProxy {
    fn default() -> Self {
        Self {
            admin: default_admin(),
            state_file: None,
            refresh: default_refresh(),
            threads: 0,
            trusted_proxies: Vec::new(),
            max_upstream_connections: default_max_upstream(),
            drain_timeout: default_proxy_drain(),
            target: None,
        }
    }
}

fn default_max_upstream() -> usize {
    512
}
fn default_proxy_drain() -> Duration {
    Duration::from_secs(10)
}

fn default_admin() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8099))
}
fn default_refresh() -> Duration {
    Duration::from_secs(30)
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Loopback endpoint that says which generation each route serves and what is in
    /// flight; the pipeline waits on it.
    pub admin: SocketAddr,
    /// The last routes the proxy knew, so that it serves them after a restart while the
    /// database is away.
    pub state_file: PathBuf,
    /// Full re-read of the routes besides LISTEN/NOTIFY.
    pub refresh: Duration,
    /// Threads `pier proxy` serves with; 0 is one per core.
    pub threads: usize,
    /// Peers whose `X-Forwarded-For` (appended to) and `X-Forwarded-Proto` are passed on
    /// to apps; from anyone else Pier writes them itself.
    pub trusted_proxies: TrustedProxies,
    /// Connections the proxy holds open to one app, across its generations.
    pub max_upstream_connections: usize,
    /// After SIGTERM: how long requests in flight get to finish before the proxy exits.
    pub drain_timeout: Duration,
    /// The target whose routes this proxy serves: each host runs its own
    /// `pier proxy --target NAME` beside its engine. Default `local`.
    pub target: String,
}

impl ProxyConfig {
    pub(crate) fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.trusts(peer)
    }
}

impl RawProxy {
    pub(super) fn resolve(self, base: &Path) -> Result<ProxyConfig, ConfigError> {
        if !self.admin.ip().is_loopback() {
            return Err(ConfigError::Invalid(
                "proxy.admin must be a loopback address".into(),
            ));
        }
        // The same CIDR rules as `server.trusted_proxies`; the proxy reads X-Forwarded-For.
        let trusted_proxies =
            TrustedProxies::parse(&self.trusted_proxies, ClientIpHeader::XForwardedFor)
                .map_err(|e| ConfigError::Invalid(format!("proxy.trusted_proxies: {e}")))?;
        if self.max_upstream_connections == 0 {
            return Err(ConfigError::Invalid(
                "proxy.max_upstream_connections must be at least 1".into(),
            ));
        }
        Ok(ProxyConfig {
            trusted_proxies,
            max_upstream_connections: self.max_upstream_connections,
            drain_timeout: self.drain_timeout,
            admin: self.admin,
            state_file: base.join(
                self.state_file
                    .unwrap_or_else(|| PathBuf::from("pier-proxy-routes.json")),
            ),
            refresh: self.refresh.max(Duration::from_secs(1)),
            threads: self.threads,
            target: self
                .target
                .unwrap_or_else(|| super::targets::LOCAL.to_owned()),
        })
    }
}

/// How `pier proxy` reaches a blue-green app.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    /// Where the proxy accepts the app's clients; several apps may share an address by
    /// `hosts`.
    listen: SocketAddr,
    /// The `Host` names routed to this app on `listen`.
    ///
    /// Default: any host (at most one app per address).
    #[serde(default)]
    hosts: Vec<String>,
    /// A request through the proxy, until the app's answer starts; then 504.
    #[serde(default = "default_route_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    timeout: Duration,
    /// Largest request body; then 413.
    #[serde(default = "default_route_body")]
    #[schemars(with = "super::doc_types::SizeText")]
    max_body: String,
    /// How long requests in flight on the old generation get to finish after the switch.
    #[serde(default = "default_drain", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    drain_timeout: Duration,
    /// How long the new generation is watched (running, no restarts, answering its health
    /// check) before the old one is retired; `"0s"` skips it. A failed soak switches back.
    #[serde(default = "default_soak", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    soak: Duration,
    /// Failed checks in a row that switch traffic back.
    #[serde(default = "default_soak_failures")]
    soak_failures: u32,
    /// The old generation keeps running during the soak as the proxy's standby (requests
    /// that cannot reach the new one go there); `false` stops it after the drain.
    #[serde(default = "default_true")]
    keep_previous_running: bool,
    /// TLS on `listen` with this certificate, see `[apps.route.tls]`.
    tls: Option<RawTls>,
}

/// TLS on the route's `listen`, this certificate chosen by SNI for the route's `hosts` (a
/// route without `hosts` serves it for any name); HTTP/2 and HTTP/1.1 offered by ALPN.
/// Every app on one address is TLS or none is.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    /// The certificate chain (PEM), leaf first.
    cert: PathBuf,
    /// Its private key (PEM).
    key: PathBuf,
}

/// PEM files of a route's certificate chain and private key, served for its `hosts` (by
/// SNI), or for any name when the route takes any host.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn default_route_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_route_body() -> String {
    "10m".into()
}
fn default_drain() -> Duration {
    Duration::from_secs(30)
}
fn default_soak() -> Duration {
    Duration::from_secs(60)
}
fn default_soak_failures() -> u32 {
    3
}
fn default_true() -> bool {
    true
}

/// How clients reach a blue-green app: through Pier's proxy on `listen`, for requests
/// whose `Host` is one of `hosts` (any host when empty).
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub listen: SocketAddr,
    pub hosts: Vec<String>,
    /// A whole request through the proxy, from its head to the end of the answer's head.
    pub timeout: Duration,
    pub max_body: u64,
    /// How long in-flight requests get to finish on the old generation after the switch.
    pub drain_timeout: Duration,
    /// How long the new generation is watched after the switch; zero disables the soak.
    pub soak: Duration,
    /// Failed checks in a row during the soak that switch traffic back.
    pub soak_failures: u32,
    /// Whether the previous generation keeps running (as the proxy's standby) during the
    /// soak, or is stopped and started again only if needed.
    pub keep_previous_running: bool,
    /// TLS on `listen`, with this certificate for the route's hosts.
    pub tls: Option<TlsFiles>,
}

impl RawRoute {
    pub(super) fn resolve(self, app: &str, base: &Path) -> Result<RouteConfig, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(format!("app `{app}`: route: {m}"));
        let max_body =
            parse_bytes(&self.max_body).map_err(|e| invalid(format!("max_body: {e}")))? as u64;
        if self.soak_failures == 0 {
            return Err(invalid("soak_failures must be at least 1".into()));
        }
        let hosts = self
            .hosts
            .into_iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .collect::<Vec<_>>();
        if hosts.iter().any(|h| h.is_empty() || h.contains('/')) {
            return Err(invalid("hosts must be host names".into()));
        }
        Ok(RouteConfig {
            listen: self.listen,
            hosts,
            timeout: self.timeout,
            max_body,
            drain_timeout: self.drain_timeout,
            soak: self.soak,
            soak_failures: self.soak_failures,
            keep_previous_running: self.keep_previous_running,
            tls: self.tls.map(|t| TlsFiles {
                cert: base.join(t.cert),
                key: base.join(t.key),
            }),
        })
    }
}
