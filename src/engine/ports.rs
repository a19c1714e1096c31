//! A container's ports: what the engine is asked to publish (TCP and UDP, each on a fixed
//! host address, an ephemeral one or nowhere) and what it says it bound, read from its
//! answer without dialing anything.

use std::collections::HashMap;
use std::net::SocketAddr;

use bollard::models::PortBinding;
use serde::{Deserialize, Serialize};

use super::{Engine, Result};
use crate::config::Protocol;

/// One port of a container, and where the engine publishes it: a fixed host address, an
/// ephemeral one (`127.0.0.1:0`), or nowhere (`None`: exposed only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub container: u16,
    pub protocol: Protocol,
    pub publish: Option<SocketAddr>,
}

impl PortSpec {
    /// `8080/tcp`, the engine's key for the port.
    pub(super) fn key(&self) -> String {
        format!("{}/{}", self.container, self.protocol)
    }
}

/// A host address the engine bound a container port to, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub container: u16,
    pub protocol: Protocol,
    pub host: SocketAddr,
}

/// The published ports; `None` when none is (the engine's default, as before ports).
pub(super) fn port_bindings(
    ports: &[PortSpec],
) -> Option<HashMap<String, Option<Vec<PortBinding>>>> {
    let bindings: HashMap<_, _> = ports
        .iter()
        .filter_map(|p| {
            let addr = p.publish?;
            let binding = PortBinding {
                host_ip: Some(addr.ip().to_string()),
                host_port: Some(addr.port().to_string()),
            };
            Some((p.key(), Some(vec![binding])))
        })
        .collect();
    (!bindings.is_empty()).then_some(bindings)
}

impl Engine {
    /// The address the engine bound TCP container port `port` to, once the container runs:
    /// blue-green candidates publish on an ephemeral port the engine picks.
    pub async fn published(&self, id: &str, port: u16) -> Result<Option<SocketAddr>> {
        Ok(self.bindings(id).await?.and_then(|all| {
            all.into_iter()
                .find(|b| b.container == port && b.protocol == Protocol::Tcp)
                .map(|b| b.host)
        }))
    }

    /// Every host address the engine bound a port of the running container `id` to, TCP
    /// and UDP, as it answers (nothing is dialed); `None` if the container is gone.
    pub async fn bindings(&self, id: &str) -> Result<Option<Vec<Binding>>> {
        let Some(c) = self.inspect_raw(id).await? else {
            return Ok(None);
        };
        let ports = c.network_settings.and_then(|n| n.ports).unwrap_or_default();
        Ok(Some(parse_bindings(ports)))
    }
}

/// The engine's port map (`"5353/udp" -> [{HostIp, HostPort}]`) as bindings, sorted. A
/// binding without a host address is on loopback: Pier publishes nothing implicitly.
fn parse_bindings(ports: HashMap<String, Option<Vec<PortBinding>>>) -> Vec<Binding> {
    let mut out: Vec<Binding> = ports
        .into_iter()
        .filter_map(|(key, bound)| {
            let (port, protocol) = key.split_once('/')?;
            let protocol = match protocol {
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                _ => return None,
            };
            let container: u16 = port.parse().ok()?;
            Some(bound.unwrap_or_default().into_iter().filter_map(move |b| {
                let ip = b
                    .host_ip
                    .filter(|i| !i.is_empty())
                    .unwrap_or_else(|| "127.0.0.1".into());
                let port: u16 = b.host_port?.parse().ok()?;
                let host = SocketAddr::new(ip.parse().ok()?, port);
                Some(Binding {
                    container,
                    protocol,
                    host,
                })
            }))
        })
        .flatten()
        .collect();
    out.sort_by_key(|b| (b.container, b.protocol.as_str(), b.host));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(ip: &str, port: &str) -> PortBinding {
        PortBinding {
            host_ip: Some(ip.to_owned()),
            host_port: Some(port.to_owned()),
        }
    }

    #[test]
    fn only_ports_with_an_address_are_published_each_under_its_protocol() {
        let spec = |container, protocol, publish: Option<&str>| PortSpec {
            container,
            protocol,
            publish: publish.map(|a| a.parse().unwrap()),
        };
        let ports = [
            spec(8080, Protocol::Tcp, Some("127.0.0.1:0")),
            spec(9090, Protocol::Tcp, None),
            spec(5353, Protocol::Udp, Some("127.0.0.1:5353")),
        ];
        let map = port_bindings(&ports).unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map["8080/tcp"], Some(vec![bound("127.0.0.1", "0")]));
        assert_eq!(map["5353/udp"], Some(vec![bound("127.0.0.1", "5353")]));
        assert_eq!(port_bindings(&ports[1..2]), None);
    }

    #[test]
    fn the_engines_port_map_reads_as_sorted_bindings_of_both_protocols() {
        let map = HashMap::from([
            (
                "5353/udp".to_owned(),
                Some(vec![bound("127.0.0.1", "40001")]),
            ),
            ("8080/tcp".to_owned(), Some(vec![bound("", "40000")])),
            ("9090/tcp".to_owned(), None),
            ("7/sctp".to_owned(), Some(vec![bound("127.0.0.1", "1")])),
            ("9/tcp".to_owned(), Some(vec![bound("::1", "40002")])),
        ]);
        let got: Vec<String> = parse_bindings(map)
            .iter()
            .map(|b| format!("{}/{} {}", b.container, b.protocol, b.host))
            .collect();
        assert_eq!(
            got,
            [
                "9/tcp [::1]:40002",
                "5353/udp 127.0.0.1:40001",
                "8080/tcp 127.0.0.1:40000"
            ]
        );
    }
}
