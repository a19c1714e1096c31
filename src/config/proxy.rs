//! `[proxy]` and an app's `[apps.route]`: where Pier's own proxy listens, which requests go
//! to which app, and how a blue-green switch drains and soaks.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ClientIpHeader, ConfigError, TrustedProxies, parse_bytes};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProxy {
    #[serde(default = "default_admin")]
    admin: SocketAddr,
    state_file: Option<PathBuf>,
    #[serde(default = "default_refresh", with = "humantime_serde")]
    refresh: Duration,
    #[serde(default)]
    threads: usize,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default = "default_max_upstream")]
    max_upstream_connections: usize,
    #[serde(default = "default_proxy_drain", with = "humantime_serde")]
    drain_timeout: Duration,
    /// The engine whose apps this proxy serves (`pier proxy --target` overrides it).
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    listen: SocketAddr,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default = "default_route_timeout", with = "humantime_serde")]
    timeout: Duration,
    #[serde(default = "default_route_body")]
    max_body: String,
    #[serde(default = "default_drain", with = "humantime_serde")]
    drain_timeout: Duration,
    #[serde(default = "default_soak", with = "humantime_serde")]
    soak: Duration,
    #[serde(default = "default_soak_failures")]
    soak_failures: u32,
    #[serde(default = "default_true")]
    keep_previous_running: bool,
    tls: Option<RawTls>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
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
