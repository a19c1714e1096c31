//! Which peers may say who the client is. A request's `X-Forwarded-For` or `Forwarded`
//! is anyone's to write; it names the client only when it was written by a proxy the
//! operator runs. Without this, one forged header would move a flood of failures onto
//! somebody else's address (braking them) or hide the sender in the logs.

use std::net::IpAddr;

use ipnet::IpNet;

/// The header a trusted proxy writes the client's address into.
#[derive(
    serde::Serialize,
    schemars::JsonSchema,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx's `$proxy_add_x_forwarded_for`,
    /// Caddy, Traefik, HAProxy's `option forwardfor`).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client;proto=https, for=proxy1`.
    Forwarded,
}

/// An entry of `trusted_proxies` that is neither a CIDR nor an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is neither a CIDR (10.0.0.0/8) nor an address")]
pub struct TrustedProxyError(String);

/// The proxies (as CIDRs) whose forwarding header Pier believes, and which header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    pub header: ClientIpHeader,
}

/// Addresses read from a forwarding header at most: a longer chain is cut, and the client
/// is taken from the part read.
const MAX_HOPS: usize = 32;

impl TrustedProxies {
    /// `["10.0.0.0/8", "127.0.0.1"]`: CIDRs, or single addresses (a /32 or /128).
    pub(crate) fn parse(
        entries: &[String],
        header: ClientIpHeader,
    ) -> Result<Self, TrustedProxyError> {
        let nets = entries
            .iter()
            .map(|e| {
                let e = e.trim();
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| TrustedProxyError(e.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { nets, header })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    pub(crate) fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client's address: the peer's own, unless the peer is trusted; then the
    /// forwarding chain is read from its right end (the hop nearest Pier), skipping
    /// trusted proxies, and the first address not trusted is the client. An entry that
    /// does not parse (`unknown`, an obfuscated name, garbage) ends the walk: what stands
    /// left of it was written by someone Pier does not trust, so the last trusted hop is
    /// taken instead.
    pub(crate) fn client<'a>(&self, peer: IpAddr, values: impl Iterator<Item = &'a str>) -> IpAddr {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return peer;
        }
        let hops: Vec<&str> = values.flat_map(|v| v.split(',')).collect();
        let mut client = peer;
        for hop in hops.iter().rev().take(MAX_HOPS) {
            let parsed = match self.header {
                ClientIpHeader::XForwardedFor => parse_plain(hop),
                ClientIpHeader::Forwarded => parse_forwarded_for(hop),
            };
            let Some(ip) = parsed else { break };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

/// `::ffff:10.0.0.1` is the IPv4 address it maps: a dual-stack listener reports IPv4
/// peers so, and a CIDR written as IPv4 must still match them.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5678`,
/// `[::1]:80`), as some proxies write it.
fn parse_plain(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(sa) = hop.parse::<std::net::SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    let bracketed = hop.strip_prefix('[')?.strip_suffix(']')?;
    bracketed.parse::<IpAddr>().ok().map(canonical)
}

/// The `for=` parameter of one `Forwarded` element (RFC 7239 section 4 and 6).
fn parse_forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then_some(v.trim())
    })?;
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    parse_plain(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn xff(nets: &[&str]) -> TrustedProxies {
        let nets: Vec<String> = nets.iter().map(|s| s.to_string()).collect();
        TrustedProxies::parse(&nets, ClientIpHeader::XForwardedFor).unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_writes() {
        let t = xff(&["10.0.0.0/8"]);
        assert_eq!(
            t.client(ip("203.0.113.9"), ["6.6.6.6"].into_iter()),
            ip("203.0.113.9")
        );
        let none = TrustedProxies::default();
        assert_eq!(
            none.client(ip("127.0.0.1"), ["6.6.6.6"].into_iter()),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn a_trusted_peer_names_the_first_untrusted_hop_from_the_right() {
        let t = xff(&["10.0.0.0/8", "127.0.0.1"]);
        // The client forged 6.6.6.6; the proxy appended the address it saw.
        let chain = ["6.6.6.6, 198.51.100.7", "10.1.2.3"];
        assert_eq!(
            t.client(ip("127.0.0.1"), chain.into_iter()),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            t.client(ip("127.0.0.1"), std::iter::empty()),
            ip("127.0.0.1")
        );
        // All hops trusted: the leftmost one.
        assert_eq!(
            t.client(ip("127.0.0.1"), ["10.9.9.9"].into_iter()),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn garbage_in_the_chain_stops_at_the_last_trusted_hop() {
        let t = xff(&["10.0.0.0/8"]);
        let chain = ["198.51.100.7, unknown, 10.0.0.2"];
        assert_eq!(t.client(ip("10.0.0.1"), chain.into_iter()), ip("10.0.0.2"));
        assert_eq!(
            t.client(ip("10.0.0.1"), ["not an ip"].into_iter()),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn forwarded_elements_with_quotes_ports_and_ipv6_are_read() {
        let t = TrustedProxies::parse(&["127.0.0.1".into()], ClientIpHeader::Forwarded).unwrap();
        let v = [r#"for="[2001:db8:cafe::17]:4711";proto=https, For=192.0.2.60;by=203.0.113.43"#];
        assert_eq!(t.client(ip("127.0.0.1"), v.into_iter()), ip("192.0.2.60"));
        let t = TrustedProxies::parse(
            &["127.0.0.1".into(), "192.0.2.0/24".into()],
            ClientIpHeader::Forwarded,
        )
        .unwrap();
        assert_eq!(
            t.client(ip("127.0.0.1"), v.into_iter()),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            t.client(ip("127.0.0.1"), ["for=_hidden, for=192.0.2.1"].into_iter()),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_cidrs() {
        let t = xff(&["127.0.0.0/8"]);
        assert!(t.trusts(ip("::ffff:127.0.0.1")));
        assert_eq!(
            t.client(ip("::ffff:127.0.0.1"), ["::ffff:1.2.3.4"].into_iter()),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn entries_that_are_not_cidrs_are_refused_by_name() {
        let err = TrustedProxies::parse(&["10.0.0.0/33".into()], ClientIpHeader::XForwardedFor)
            .unwrap_err()
            .to_string();
        assert!(err.contains("10.0.0.0/33"), "{err}");
        assert!(TrustedProxies::parse(&["::1".into()], ClientIpHeader::XForwardedFor).is_ok());
        for bad in ["x", "10.0.0.0/", "::/129"] {
            assert!(
                TrustedProxies::parse(&[bad.into()], ClientIpHeader::XForwardedFor).is_err(),
                "{bad}"
            );
        }
        let any = xff(&["0.0.0.0/0", "2001:db8::/32"]);
        assert!(any.trusts(ip("8.8.8.8")));
        assert!(any.trusts(ip("2001:db8:1::1")));
        assert!(!any.trusts(ip("2001:db9::1")));
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let t = xff(&["10.0.0.0/8"]);
        let mut chain = vec!["198.51.100.7".to_owned()];
        chain.extend((0..100).map(|i| format!("10.0.0.{}", i % 250)));
        let joined = chain.join(",");
        // Past MAX_HOPS trusted hops the walk stops on a trusted one, not on the client.
        assert!(t.trusts(t.client(ip("10.0.0.1"), [joined.as_str()].into_iter())));
    }
}
