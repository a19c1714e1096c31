//! An app's ports: `port = 8080` (one TCP port, the HTTP one, as always) or `ports = [...]`,
//! several, TCP and UDP. Exactly one of them is the HTTP port: the one `pier proxy` routes a
//! blue-green app's requests to, `port_env` names and the HTTP health check asks.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, Strategy};

/// The most ports one app may list: enough for any real service, and a cap on what one
/// container asks the engine to bind.
const MAX_PORTS: usize = 32;

/// The name of the HTTP port, and its default name.
pub const HTTP: &str = "http";

/// A port's transport. Parsed at load: a typo is a config error, never TCP by default.
#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
}

impl Protocol {
    /// As the engine writes it in a port key (`8080/tcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of an app's `ports`: `{ container = 9090, name = "metrics" }`.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPort {
    /// The port the app listens on inside its container (1-65535).
    container: u16,
    /// The port's transport.
    #[serde(default)]
    protocol: Protocol,
    /// The port's name on the app's page, in the API and in the journal: lower-case
    /// letters, digits and `-`, unique in the app. `"http"` is the HTTP port's name only.
    ///
    /// Default: `"http"` for the HTTP port, else `"<container>-<protocol>"` (`"5353-udp"`).
    name: Option<String>,
    /// Marks the HTTP port: the one `pier proxy` routes a blue-green app's requests to,
    /// the HTTP health check asks and `port_env` names. A TCP port; at most one says so;
    /// when none does, the first TCP port is the HTTP port.
    #[serde(default)]
    http: bool,
    /// Recreate apps: the host address this port is published on (`127.0.0.1:9091`), by
    /// the same rule as the app's `publish` (every interface only with `publish_public =
    /// true`). Without it the port is not published. Not for blue-green apps: each of
    /// their ports is published on an ephemeral loopback port.
    publish: Option<SocketAddr>,
}

/// One port of an app's container, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub name: String,
    pub container: u16,
    pub protocol: Protocol,
    /// The fixed host address (recreate); `None`: not published at a fixed address.
    pub publish: Option<SocketAddr>,
}

impl PortConfig {
    /// `8080/tcp`, as the engine keys it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.container, self.protocol)
    }
}

/// An app's ports. Invariants (checked at load, kept by every constructor): at least one;
/// `http` indexes a TCP port; no container port and protocol, no name and no fixed host
/// address and protocol twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    list: Vec<PortConfig>,
    http: usize,
    /// Written as the app's `port` (and `publish`), not as `ports`: how errors name keys.
    single: bool,
}

impl Ports {
    /// `port = N` (with `publish`): one TCP port, the HTTP one.
    pub fn single(container: u16, publish: Option<SocketAddr>) -> Self {
        Ports {
            list: vec![PortConfig {
                name: HTTP.to_owned(),
                container,
                protocol: Protocol::Tcp,
                publish,
            }],
            http: 0,
            single: true,
        }
    }

    /// The HTTP port.
    pub fn http(&self) -> &PortConfig {
        &self.list[self.http]
    }

    /// Every port, in the order written.
    pub fn iter(&self) -> impl Iterator<Item = &PortConfig> {
        self.list.iter()
    }

    /// Every port but the HTTP one, in the order written.
    pub fn others(&self) -> impl Iterator<Item = &PortConfig> {
        let http = self.http;
        self.list
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != http)
            .map(|(_, p)| p)
    }

    /// The same ports published nowhere: a further service's container exposes them only.
    pub fn unpublished(&self) -> Self {
        let mut p = self.clone();
        p.list.iter_mut().for_each(|p| p.publish = None);
        p
    }

    /// Fixed host addresses with the key that asked for each (`publish`, `ports[2].publish`).
    pub fn published(&self) -> impl Iterator<Item = (String, SocketAddr, Protocol)> + '_ {
        self.list.iter().enumerate().filter_map(|(i, p)| {
            let key = if self.single {
                "publish".to_owned()
            } else {
                format!("ports[{i}].publish")
            };
            p.publish.map(|a| (key, a, p.protocol))
        })
    }
}

/// Whether two host addresses of one protocol take the same socket: the same port, and
/// the same address or either one every interface.
pub(super) fn collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// What an app wrote about its ports.
pub(super) struct Written {
    pub port: Option<u16>,
    pub publish: Option<SocketAddr>,
    pub ports: Option<Vec<RawPort>>,
    pub public: bool,
    pub strategy: Strategy,
}

fn invalid(app: &str, msg: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("app `{app}`: {msg}"))
}

impl Written {
    /// `port` or `ports`, never both; each publish checked by the app's rules.
    pub(super) fn resolve(mut self, app: &str) -> Result<Ports, ConfigError> {
        let ports = match (self.port, self.ports.take()) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    app,
                    "give `port` or `ports`, not both (`port = 8080` is `ports = [{ container = 8080 }]`)",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    app,
                    "give the port it listens on: `port = 8080`, or `ports = [...]` for several",
                ));
            }
            (Some(port), None) => Ports::single(port, self.publish),
            (None, Some(_)) if self.publish.is_some() => {
                return Err(invalid(
                    app,
                    "`publish` goes with `port`; with `ports`, give each port its own \
                     (`ports = [{ container = 8080, publish = \"127.0.0.1:8081\" }]`)",
                ));
            }
            (None, Some(raw)) => several(app, raw)?,
        };
        if ports.single {
            // As it always was: the app's `publish`, by the app's rule.
            super::contained::check_publish(app, self.publish, self.public)?;
        } else {
            self.check_port_publishes(app, &ports)?;
        }
        Ok(ports)
    }

    /// A port's `publish`: none on a blue-green app; every interface only with
    /// `publish_public = true`, which acknowledges nothing without some `publish`.
    fn check_port_publishes(&self, app: &str, ports: &Ports) -> Result<(), ConfigError> {
        let mut any = false;
        for (key, addr, _) in ports.published() {
            any = true;
            if self.strategy == Strategy::BlueGreen {
                return Err(invalid(
                    app,
                    format!(
                        "{key}: a blue-green app publishes each port on an ephemeral \
                         loopback port; clients come through the proxy's `route.listen`"
                    ),
                ));
            }
            if addr.ip().is_unspecified() && !self.public {
                return Err(invalid(
                    app,
                    format!(
                        "{key} = \"{addr}\" listens on every interface of the host, so \
                         anyone who reaches the host reaches the app, past any proxy in front \
                         of it; publish on 127.0.0.1:{port} or on one address of the host, \
                         or set publish_public = true if every interface is meant",
                        port = addr.port()
                    ),
                ));
            }
        }
        if !any {
            super::contained::check_publish(app, None, self.public)?;
        }
        Ok(())
    }
}

/// `ports = [...]`: each entry checked, the HTTP port chosen, nothing twice.
fn several(app: &str, raw: Vec<RawPort>) -> Result<Ports, ConfigError> {
    if raw.is_empty() || raw.len() > MAX_PORTS {
        return Err(invalid(app, format!("ports: list 1 to {MAX_PORTS} ports")));
    }
    let http = http_index(app, &raw)?;
    let mut list: Vec<PortConfig> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let p = r.resolve(app, i, i == http)?;
        check_unique(app, i, &p, &list)?;
        list.push(p);
    }
    Ok(Ports {
        list,
        http,
        single: false,
    })
}

/// The entry marked `http = true`, else the first TCP one. A UDP port cannot be it.
fn http_index(app: &str, raw: &[RawPort]) -> Result<usize, ConfigError> {
    let marked: Vec<usize> = (0..raw.len()).filter(|i| raw[*i].http).collect();
    if let Some(&i) = marked.iter().find(|i| raw[**i].protocol == Protocol::Udp) {
        return Err(invalid(
            app,
            format!(
                "ports[{i}].http: {}/udp cannot be the HTTP port (the one `pier proxy` and \
                 the health check speak HTTP to): HTTP is TCP; mark a TCP port `http = true`",
                raw[i].container
            ),
        ));
    }
    match marked[..] {
        [i] => Ok(i),
        [] => raw
            .iter()
            .position(|r| r.protocol == Protocol::Tcp)
            .ok_or_else(|| {
                invalid(
                    app,
                    "ports: list a TCP port, the HTTP port `pier proxy` and the health check use",
                )
            }),
        [a, b, ..] => Err(invalid(
            app,
            format!("ports[{a}] and ports[{b}] both say `http = true`: one port is the HTTP port"),
        )),
    }
}

impl RawPort {
    fn resolve(self, app: &str, i: usize, is_http: bool) -> Result<PortConfig, ConfigError> {
        let key = format!("{}/{}", self.container, self.protocol);
        if self.container == 0 {
            return Err(invalid(app, format!("ports[{i}].container: 1 to 65535")));
        }
        let name = match self.name {
            None if is_http => HTTP.to_owned(),
            None => format!("{}-{}", self.container, self.protocol),
            Some(n) if n == HTTP && !is_http => {
                let why = match self.protocol {
                    Protocol::Udp => "a UDP port cannot be the HTTP port (HTTP is TCP)",
                    Protocol::Tcp => "mark this port `http = true` to make it the HTTP port",
                };
                return Err(invalid(
                    app,
                    format!("ports[{i}].name: `http` names the HTTP port only ({key}: {why})"),
                ));
            }
            Some(n) if !super::services::valid_service_name(&n) => {
                return Err(invalid(
                    app,
                    format!(
                        "ports[{i}].name `{n}`: use lower-case letters, digits and - (at most 32)"
                    ),
                ));
            }
            Some(n) => n,
        };
        Ok(PortConfig {
            name,
            container: self.container,
            protocol: self.protocol,
            publish: self.publish,
        })
    }
}

/// No container port and protocol, no name and no host address of one protocol twice.
fn check_unique(
    app: &str,
    i: usize,
    p: &PortConfig,
    before: &[PortConfig],
) -> Result<(), ConfigError> {
    for (j, o) in before.iter().enumerate() {
        if o.container == p.container && o.protocol == p.protocol {
            return Err(invalid(
                app,
                format!("ports[{j}] and ports[{i}] both list {}", p.key()),
            ));
        }
        if o.name == p.name {
            return Err(invalid(
                app,
                format!("ports[{j}] and ports[{i}] are both named `{}`", p.name),
            ));
        }
        if let (Some(a), Some(b)) = (o.publish, p.publish)
            && o.protocol == p.protocol
            && collide(a, b)
        {
            return Err(invalid(
                app,
                format!(
                    "ports[{j}].publish and ports[{i}].publish both publish {b}/{}",
                    p.protocol
                ),
            ));
        }
    }
    Ok(())
}

/// Two apps that run on one engine cannot publish one host address of one protocol: the
/// second would fail at every deployment (recreate stops the first's old generation only).
/// Refused at load, naming both apps and keys.
pub(super) fn check_publishes(apps: &[super::AppConfig]) -> Result<(), ConfigError> {
    let mut seen: Vec<(&super::AppConfig, String, SocketAddr, Protocol)> = Vec::new();
    for app in apps {
        for (key, addr, protocol) in app.ports.published() {
            let clash = seen.iter().find(|(other, _, a, p)| {
                *p == protocol
                    && collide(*a, addr)
                    && other.targets.iter().any(|t| app.targets.contains(t))
            });
            if let Some((other, other_key, a, _)) = clash {
                return Err(ConfigError::Invalid(format!(
                    "apps `{}` ({other_key} = \"{a}\") and `{}` ({key} = \"{addr}\") both \
                     publish {}/{protocol} on one engine: give each app its own host port",
                    other.name,
                    app.name,
                    addr.port()
                )));
            }
            seen.push((app, key, addr, protocol));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "ports_tests.rs"]
mod tests;
