//! The client's address as the brakes and the logs use it: the TCP peer's, or, when the
//! peer is one of `server.trusted_proxies`, the one its forwarding header names. One
//! function decides it, so the webhook brake, the sign-in brake and the log lines cannot
//! disagree about who sent a request.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use super::AppState;
use crate::config::{ClientIpHeader, TrustedProxies};

/// The client's address, for brakes and log lines (never for authentication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientAddr(pub Option<IpAddr>);

/// As log lines write it: the address, or `unknown` (a peer the server could not name).
impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("unknown"),
        }
    }
}

pub(crate) fn client_addr(
    trusted: &TrustedProxies,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Option<IpAddr> {
    let peer = peer?.ip();
    if trusted.is_empty() {
        return Some(peer);
    }
    let name = match trusted.header {
        ClientIpHeader::XForwardedFor => "x-forwarded-for",
        ClientIpHeader::Forwarded => "forwarded",
    };
    // A header value that is not text names nobody: it is skipped like a missing one.
    let values = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    Some(trusted.client(peer, values))
}

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        Ok(ClientAddr(client_addr(
            &s.config.server.trusted_proxies,
            peer,
            &parts.headers,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer_and_only_the_configured_one() {
        let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=6.6.6.6"),
        ]);
        let none = TrustedProxies::default();
        assert_eq!(client_addr(&none, Some(peer), &h), Some(peer.ip()));
        let xff =
            TrustedProxies::parse(&["127.0.0.1".into()], ClientIpHeader::XForwardedFor).unwrap();
        assert_eq!(
            client_addr(&xff, Some(peer), &h),
            Some("198.51.100.7".parse().unwrap())
        );
        let fwd = TrustedProxies::parse(&["127.0.0.1".into()], ClientIpHeader::Forwarded).unwrap();
        assert_eq!(
            client_addr(&fwd, Some(peer), &h),
            Some("6.6.6.6".parse().unwrap())
        );
        let other: SocketAddr = "203.0.113.1:1".parse().unwrap();
        assert_eq!(client_addr(&xff, Some(other), &h), Some(other.ip()));
        assert_eq!(client_addr(&xff, None, &h), None);
    }
}
