//! The header rules of both forwarding paths, in one place: the byte path (`h1`) and the
//! hyper path (`forward`) ask the same functions what a header is, so the two cannot drift
//! apart. A request either passes every rule here or is refused before any byte of it
//! reaches an app.
//!
//! - Hop-by-hop headers (RFC 9110, 7.6.1) never cross the proxy.
//! - Headers that define the message (`Host`, `Content-Length`, `Transfer-Encoding`) are
//!   never hop-by-hop, whatever a `Connection` header names: a client cannot make the
//!   proxy drop the length of a body it still forwards.
//! - The forwarding headers (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`) are Pier's: a
//!   client's copies never reach the app. Only a peer in `proxy.trusted_proxies` may pass
//!   `X-Forwarded-For` (Pier appends the peer) and `X-Forwarded-Proto` through.
//! - A name with an underscore never reaches the app (as with nginx's default): CGI and
//!   WSGI stacks map `X_Forwarded_For` and `X-Forwarded-For` to the same key.

use hyper::StatusCode;

/// Headers that describe one hop, never forwarded.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers a `Connection` header can never turn into hop-by-hop ones.
pub(crate) const MESSAGE_DEFINING: [&str; 3] = ["host", "content-length", "transfer-encoding"];

/// Forwarding headers Pier writes itself; what a client sent under these names is dropped.
pub(crate) const PIER_OWNED: [&str; 5] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "x-real-ip",
];

fn is(name: &[u8], list: &[&str]) -> bool {
    list.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
}

/// The comma-separated tokens of a message's `Connection` headers.
#[derive(Default)]
pub(crate) struct Connection<'a> {
    tokens: Vec<&'a [u8]>,
}

/// A `Connection` header naming more headers than this is refused: nothing needs it.
const MAX_CONNECTION_TOKENS: usize = 32;

impl<'a> Connection<'a> {
    /// From every `(name, value)` of a head; `None` when it names absurdly many headers.
    pub(crate) fn of<I>(headers: I) -> Option<Connection<'a>>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let mut c = Connection::default();
        for (name, value) in headers {
            if !name.eq_ignore_ascii_case(b"connection") {
                continue;
            }
            for t in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if !t.is_empty() {
                    c.tokens.push(t);
                }
            }
            if c.tokens.len() > MAX_CONNECTION_TOKENS {
                return None;
            }
        }
        Some(c)
    }

    pub(crate) fn names(&self, token: &str) -> bool {
        self.tokens
            .iter()
            .any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
    }

    /// Whether `name` is hop-by-hop in this message: listed, or named in `Connection`
    /// and not one of the headers that define the message.
    pub(crate) fn hop_by_hop(&self, name: &[u8]) -> bool {
        is(name, &HOP_BY_HOP)
            || (!is(name, &MESSAGE_DEFINING)
                && self.tokens.iter().any(|t| t.eq_ignore_ascii_case(name)))
    }
}

/// What a request header becomes on its way to the app.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ToApp {
    Keep,
    Drop,
    /// A prior `X-Forwarded-For`: kept (and the peer appended) only from a trusted proxy.
    PriorFor,
    /// A prior `X-Forwarded-Proto`: kept only from a trusted proxy, and only `http`/`https`.
    PriorProto,
}

pub(crate) fn request_header(name: &[u8], conn: &Connection) -> ToApp {
    if name.contains(&b'_') {
        ToApp::Drop
    } else if name.eq_ignore_ascii_case(b"x-forwarded-for") {
        ToApp::PriorFor
    } else if name.eq_ignore_ascii_case(b"x-forwarded-proto") {
        ToApp::PriorProto
    } else if is(name, &PIER_OWNED) || conn.hop_by_hop(name) {
        ToApp::Drop
    } else {
        ToApp::Keep
    }
}

/// Whether an answer header goes on to the client. The byte path keeps the app's
/// framing headers (it passes the body through as framed); hyper frames its own.
pub(crate) fn answer_header(name: &[u8], conn: &Connection) -> bool {
    !conn.hop_by_hop(name)
}

/// A value a trusted proxy may give for `X-Forwarded-Proto`.
pub(crate) fn valid_proto(value: &[u8]) -> bool {
    value == b"http" || value == b"https"
}

/// Why a request is answered by the proxy itself and its connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub text: &'static str,
}

const fn refuse(status: StatusCode, text: &'static str) -> Refusal {
    Refusal { status, text }
}

pub(crate) const BAD_REQUEST: Refusal =
    refuse(StatusCode::BAD_REQUEST, "The request is malformed.");
pub(crate) const BAD_HOST: Refusal = refuse(
    StatusCode::BAD_REQUEST,
    "The request needs exactly one valid Host header.",
);
pub(crate) const TOO_LARGE: Refusal = refuse(
    StatusCode::PAYLOAD_TOO_LARGE,
    "The request body is too large.",
);
pub(crate) const BAD_BODY: Refusal = refuse(
    StatusCode::BAD_REQUEST,
    "The request body could not be read.",
);

/// The checks every request passes before it is forwarded, on either path, given its
/// method, whether it is HTTP/1.1 (which must name a host) and its header lines as sent.
pub(crate) fn check_request<'a, I>(method: &[u8], http11: bool, headers: I) -> Result<(), Refusal>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    // A proxy for apps, not a tunnel; TRACE would echo what the proxy added.
    if method.eq_ignore_ascii_case(b"CONNECT") || method.eq_ignore_ascii_case(b"TRACE") {
        return Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "This method is not served here.",
        ));
    }
    let (mut hosts, mut length, mut coding, mut tokens) = (0, false, None, 0);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case(b"connection") {
            // The same bound `Connection::of` has: both paths see the same tokens.
            tokens += value
                .split(|b| *b == b',')
                .filter(|t| !t.trim_ascii().is_empty())
                .count();
            if tokens > MAX_CONNECTION_TOKENS {
                return Err(BAD_REQUEST);
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if hosts > 1 || !valid_host(value) {
                return Err(BAD_HOST);
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if length || parse_length(value).is_none() {
                return Err(BAD_REQUEST);
            }
            length = true;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if coding.is_some() {
                return Err(BAD_REQUEST);
            }
            coding = Some(value);
        }
    }
    if http11 && hosts == 0 {
        return Err(BAD_HOST);
    }
    match coding {
        None => Ok(()),
        // Both framings at once is how requests are smuggled (RFC 9112, 6.1).
        Some(_) if length => Err(BAD_REQUEST),
        Some(v) if v.trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(()),
        Some(_) => Err(refuse(
            StatusCode::NOT_IMPLEMENTED,
            "Only the chunked transfer coding is served here.",
        )),
    }
}

/// A body length as RFC 9110 writes it: one or more digits, nothing else (no sign, no
/// spaces, no list), that fits a u64.
pub(crate) fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A `Host` value: a registered name, IPv4 or bracketed IPv6 literal, with an optional
/// port; no path, no empty labels.
pub(crate) fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.strip_prefix(b"[") {
        Some(rest) => match rest.iter().position(|b| *b == b']') {
            Some(end) => {
                let literal = &rest[..end];
                if literal.is_empty()
                    || !literal
                        .iter()
                        .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
                {
                    return false;
                }
                (&b"ip6"[..], &rest[end + 1..])
            }
            None => return false,
        },
        None => match value.iter().position(|b| *b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &b""[..]),
        },
    };
    let port_ok = match port.strip_prefix(b":") {
        Some(digits) => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        None => port.is_empty(),
    };
    let name = host.strip_suffix(b".").unwrap_or(host);
    port_ok
        && !name.is_empty()
        && name.split(|b| *b == b'.').all(|label| {
            !label.is_empty()
                && label
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: &str, lines: &[(&str, &str)]) -> Result<(), Refusal> {
        check_request(
            method.as_bytes(),
            true,
            lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        )
    }

    #[test]
    fn a_connection_header_cannot_make_a_message_defining_header_hop_by_hop() {
        let lines: [(&[u8], &[u8]); 1] = [(b"Connection", b"host, Content-Length , x-a")];
        let c = Connection::of(lines).unwrap();
        for kept in ["Host", "content-length", "x-b"] {
            assert_eq!(request_header(kept.as_bytes(), &c), ToApp::Keep, "{kept}");
        }
        assert_eq!(request_header(b"X-A", &c), ToApp::Drop);
        assert_eq!(request_header(b"Transfer-Encoding", &c), ToApp::Drop);
        assert!(answer_header(b"Content-Length", &c));
        assert!(!answer_header(b"x-a", &c));
    }

    #[test]
    fn forwarding_headers_and_underscore_names_are_pier_s() {
        let c = Connection::default();
        for dropped in [
            "Forwarded",
            "X-Real-IP",
            "x-forwarded-host",
            "X_Forwarded_For",
            "a_b",
        ] {
            assert_eq!(
                request_header(dropped.as_bytes(), &c),
                ToApp::Drop,
                "{dropped}"
            );
        }
        assert_eq!(request_header(b"X-Forwarded-For", &c), ToApp::PriorFor);
        assert_eq!(request_header(b"x-forwarded-proto", &c), ToApp::PriorProto);
    }

    #[test]
    fn a_request_with_ambiguous_framing_or_host_is_refused() {
        assert_eq!(check("GET", &[("Host", "a")]), Ok(()));
        assert_eq!(check("GET", &[("Host", "a"), ("Host", "a")]), Err(BAD_HOST));
        assert_eq!(check("GET", &[]), Err(BAD_HOST));
        assert!(check_request(b"GET", false, []).is_ok());
        for host in ["", "a/b", "a..b", "a b", "[::1", "a:x", "a:123456", "@a"] {
            assert_eq!(check("GET", &[("Host", host)]), Err(BAD_HOST), "{host:?}");
        }
        for host in ["a.test", "A.test.:8080", "[::1]:80", "10.0.0.1", "x_y.test"] {
            assert_eq!(check("GET", &[("Host", host)]), Ok(()), "{host:?}");
        }
        let te = ("Transfer-Encoding", "chunked");
        assert_eq!(check("POST", &[("Host", "a"), te]), Ok(()));
        assert!(check("POST", &[("Host", "a"), te, ("Content-Length", "3")]).is_err());
        assert!(check("POST", &[("Host", "a"), te, te]).is_err());
        assert!(
            check(
                "POST",
                &[("Host", "a"), ("Transfer-Encoding", "gzip, chunked")]
            )
            .is_err()
        );
        for cl in ["+5", "5, 5", " 5", "-1", "0x5", "", "99999999999999999999"] {
            assert!(
                check("POST", &[("Host", "a"), ("Content-Length", cl)]).is_err(),
                "{cl:?}"
            );
        }
        let two = [
            ("Host", "a"),
            ("Content-Length", "5"),
            ("Content-Length", "5"),
        ];
        assert!(check("POST", &two).is_err());
        let many = vec!["x"; MAX_CONNECTION_TOKENS + 1].join(", ");
        assert!(check("GET", &[("Host", "a"), ("Connection", &many)]).is_err());
        for m in ["CONNECT", "TRACE", "connect"] {
            assert_eq!(check(m, &[("Host", "a")]).unwrap_err().status, 405);
        }
    }

    #[test]
    fn a_length_is_digits_only() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"18446744073709551615"), None);
        assert_eq!(
            parse_length(b"1844674407370955161"),
            Some(1_844_674_407_370_955_161)
        );
        for bad in [&b"+5"[..], b"5 ", b"", b"\xff", b"5,5"] {
            assert_eq!(parse_length(bad), None, "{bad:?}");
        }
    }
}
