//! Request and answer heads, parsed with `httparse` (hyper's own parser) and written out
//! again as bytes for the next hop: no header map is built and nothing is re-encoded.
//!
//! Only what this module fully understands is forwarded here. Anything else (HTTP/1.0,
//! upgrades, `Expect`, chunked uploads, odd request targets, malformed or oversized heads)
//! is left to hyper's server, which answers it by the book: [`Parsed::Other`].

use super::body::Framing;
use crate::proxy::rules::{self, Refusal, ToApp};

/// A head larger than this is not ours to parse: hyper answers it (431).
pub const MAX_HEAD: usize = 64 * 1024;
/// Header lines parsed per head; hyper's server takes up to 100.
const MAX_HEADERS: usize = 100;

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    /// The head has not fully arrived.
    Partial,
    Done(T),
    /// Not a request this path forwards: hand the connection to hyper.
    Other,
    /// A request no path may forward: answered by the proxy, its connection closed.
    Refused(Refusal),
}

/// What the forwarding loop needs to know about a request once its head is rewritten.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head in the client's buffer.
    pub len: usize,
    /// The body's `Content-Length` (0 when there is none).
    pub body: u64,
    /// The client asked to close the connection after this answer.
    pub close: bool,
    /// A method that may be sent twice (to the standby when the serving generation
    /// dropped it unanswered).
    pub idempotent: bool,
    /// `HEAD`: the answer has no body whatever its headers say.
    pub head_only: bool,
    /// Where the host name (port and trailing dot removed) is in the client's buffer.
    pub host: Option<(usize, usize)>,
}

/// The values a proxy adds to each request it forwards.
pub struct Forwarding<'a> {
    pub peer_ip: &'a [u8],
    pub tls: bool,
    /// The peer is a trusted proxy: its `X-Forwarded-For` and `-Proto` pass through.
    pub trusted: bool,
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Prior `X-Forwarded-For` lines kept from a trusted proxy; more is refused.
const MAX_PRIOR_FOR: usize = 16;

fn pairs<'h, 'b>(
    headers: &'h [httparse::Header<'b>],
) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + 'h {
    headers.iter().map(|h| (h.name.as_bytes(), h.value))
}

/// Parses the request head at the start of `buf` and, when this path forwards it, writes
/// the head for the app into `out` (cleared first): the same method, target and headers,
/// minus hop-by-hop and forwarding ones, plus Pier's `X-Forwarded-For/-Proto/-Host`.
pub fn request(buf: &[u8], fwd: &Forwarding, out: &mut Vec<u8>) -> Parsed<RequestHead> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut lines);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        _ => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Other;
    };
    let headers = &*req.headers;
    if let Err(r) = rules::check_request(method.as_bytes(), version == 1, pairs(headers)) {
        return Parsed::Refused(r);
    }
    if version != 1 || !target.starts_with('/') {
        return Parsed::Other;
    }
    let mut body = None;
    let mut host = None;
    for h in headers {
        let n = h.name;
        if eq(n, "content-length") {
            // Checked above: one header, digits only.
            body = rules::parse_length(h.value);
        } else if eq(n, "transfer-encoding") || eq(n, "upgrade") || eq(n, "expect") {
            return Parsed::Other;
        } else if eq(n, "host") {
            host = host_range(buf, h.value);
        }
    }
    let Some(conn) = rules::Connection::of(pairs(headers)) else {
        return Parsed::Refused(rules::BAD_REQUEST);
    };
    let close = conn.names("close");

    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Err(r) = write_request_headers(out, headers, &conn, fwd) {
        return Parsed::Refused(r);
    }
    if let Some((s, e)) = host {
        out.extend_from_slice(b"X-Forwarded-Host: ");
        out.extend(buf[s..e].iter().map(u8::to_ascii_lowercase));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Parsed::Done(RequestHead {
        len,
        body: body.unwrap_or(0),
        close,
        idempotent: matches!(method, "GET" | "HEAD" | "OPTIONS"),
        head_only: method == "HEAD",
        host,
    })
}

/// The request's headers for the app, then `X-Forwarded-For` (a trusted peer's prior
/// values first, at most [`MAX_PRIOR_FOR`] lines) and `X-Forwarded-Proto`.
fn write_request_headers(
    out: &mut Vec<u8>,
    headers: &[httparse::Header<'_>],
    conn: &rules::Connection<'_>,
    fwd: &Forwarding,
) -> Result<(), Refusal> {
    let mut prior_for: [&[u8]; MAX_PRIOR_FOR] = [b""; MAX_PRIOR_FOR];
    let mut priors = 0;
    let mut proto: &[u8] = if fwd.tls { b"https" } else { b"http" };
    for h in headers {
        match rules::request_header(h.name.as_bytes(), conn) {
            ToApp::Keep => header_line(out, h.name.as_bytes(), h.value),
            ToApp::Drop => {}
            ToApp::PriorFor if fwd.trusted => {
                if priors == MAX_PRIOR_FOR {
                    return Err(rules::BAD_REQUEST);
                }
                prior_for[priors] = h.value;
                priors += 1;
            }
            ToApp::PriorProto if fwd.trusted && rules::valid_proto(h.value) => proto = h.value,
            ToApp::PriorFor | ToApp::PriorProto => {}
        }
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    for prior in &prior_for[..priors] {
        out.extend_from_slice(prior);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(fwd.peer_ip);
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: ");
    out.extend_from_slice(proto);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Where the host name of a `Host` value lies in `buf` (the value is a slice of it):
/// `host:port`, `[v6]:port` or a bare host, without its port or a trailing dot.
fn host_range(buf: &[u8], value: &[u8]) -> Option<(usize, usize)> {
    let start = value.as_ptr() as usize - buf.as_ptr() as usize;
    let mut v = value;
    let mut skip = 0;
    if let Some(rest) = v.strip_prefix(b"[") {
        let end = rest.iter().position(|b| *b == b']').unwrap_or(rest.len());
        v = &rest[..end];
        skip = 1;
    } else if let Some(colon) = v.iter().rposition(|b| *b == b':') {
        let port = &v[colon + 1..];
        if !port.is_empty() && port.iter().all(u8::is_ascii_digit) {
            v = &v[..colon];
        }
    }
    while let Some(rest) = v.strip_suffix(b".") {
        v = rest;
    }
    (!v.is_empty()).then_some((start + skip, start + skip + v.len()))
}

/// What the forwarding loop needs to know about the app's answer.
#[derive(Debug, PartialEq, Eq)]
pub struct AnswerHead {
    /// Bytes of the head in the upstream buffer.
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
    /// The app keeps the connection open after this answer.
    pub reusable: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the app's answer is not valid HTTP/1.1: {0}")]
pub struct BadAnswer(&'static str);

/// Parses the app's answer head at the start of `buf` and writes the head for the client
/// into `out` (appended), without its final blank line: the caller may add
/// `Connection: close`. An informational answer (1xx) is reported as it is, for the caller
/// to pass on before reading the next head.
pub fn answer(
    buf: &[u8],
    head_request: bool,
    out: &mut Vec<u8>,
) -> Result<Parsed<AnswerHead>, BadAnswer> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut lines);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(Parsed::Partial),
        Ok(httparse::Status::Partial) => return Err(BadAnswer("head too large")),
        Err(_) => return Err(BadAnswer("malformed head")),
    };
    let (Some(version), Some(status)) = (resp.version, resp.code) else {
        return Err(BadAnswer("no status"));
    };
    if status == 101 {
        return Err(BadAnswer("switching protocols without an upgrade"));
    }
    let headers = &*resp.headers;
    let conn =
        rules::Connection::of(pairs(headers)).ok_or(BadAnswer("too many Connection tokens"))?;
    let (length, chunked) = answer_length(headers)?;
    let informational = (100..200).contains(&status);
    let framing = if informational || head_request || status == 204 || status == 304 {
        Framing::Length(0)
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::chunked(),
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    let reusable = version == 1 && !conn.names("close") && framing != Framing::Close;
    write_answer_head(out, status, resp.reason, headers, &conn, chunked.is_some());
    Ok(Parsed::Done(AnswerHead {
        len,
        status,
        framing,
        reusable,
    }))
}

/// The answer's `Content-Length` (one, digits only) and whether its last transfer coding
/// is chunked (`None`: no `Transfer-Encoding`).
fn answer_length(
    headers: &[httparse::Header<'_>],
) -> Result<(Option<u64>, Option<bool>), BadAnswer> {
    let mut length = None;
    let mut chunked = None;
    for h in headers {
        if eq(h.name, "content-length") {
            let v = rules::parse_length(h.value).ok_or(BadAnswer("invalid Content-Length"))?;
            if length.is_some() {
                return Err(BadAnswer("more than one Content-Length"));
            }
            length = Some(v);
        } else if eq(h.name, "transfer-encoding") {
            // The last coding decides: chunked ends itself, anything else ends at close.
            let last = h.value.rsplit(|b| *b == b',').next().unwrap_or(b"");
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        }
    }
    Ok((length, chunked))
}

/// The status line and the headers for the client, without the final blank line.
fn write_answer_head(
    out: &mut Vec<u8>,
    status: u16,
    reason: Option<&str>,
    headers: &[httparse::Header<'_>],
    conn: &rules::Connection<'_>,
    transfer_encoded: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    // httparse guarantees three digits.
    out.extend_from_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in headers {
        let n = h.name;
        // The body's bytes pass through as the app framed them: its `Transfer-Encoding`
        // (and `Trailer`) stay, and a `Content-Length` beside them is void.
        let keep = if eq(n, "transfer-encoding") || eq(n, "trailer") {
            true
        } else if eq(n, "content-length") {
            !transfer_encoded
        } else {
            rules::answer_header(n.as_bytes(), conn)
        };
        if keep {
            header_line(out, n.as_bytes(), h.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FWD: Forwarding = Forwarding {
        peer_ip: b"10.0.0.7",
        tls: false,
        trusted: false,
    };

    fn forward(raw: &str) -> (Parsed<RequestHead>, String) {
        let mut out = Vec::new();
        let p = request(raw.as_bytes(), &FWD, &mut out);
        (p, String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_request_keeps_its_headers_and_gains_the_forwarded_ones() {
        let raw = "GET /a?b=1 HTTP/1.1\r\nHost: App.Test:8080\r\nAccept: */*\r\n\
                   Connection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nKeep-Alive: 5\r\n\
                   X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nX-Last: z\r\n\r\nnext";
        let (p, out) = forward(raw);
        let Parsed::Done(head) = p else {
            panic!("{p:?}")
        };
        assert_eq!(head.len, raw.len() - 4);
        assert_eq!(
            out,
            "GET /a?b=1 HTTP/1.1\r\nHost: App.Test:8080\r\nAccept: */*\r\nX-Last: z\r\n\
             X-Forwarded-For: 10.0.0.7\r\nX-Forwarded-Proto: http\r\n\
             X-Forwarded-Host: app.test\r\n\r\n"
        );
        let (s, e) = head.host.unwrap();
        assert_eq!(&raw[s..e], "App.Test");
        assert!(!head.close && head.idempotent && !head.head_only);
    }

    #[test]
    fn a_trusted_proxy_s_forwarded_for_is_appended_to_in_order() {
        let raw = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\
                   x-forwarded-for: 7.7.7.7, 8.8.8.8\r\nX-Forwarded-Proto: https\r\n\
                   Content-Length: 0\r\n\r\n";
        let fwd = Forwarding {
            trusted: true,
            ..FWD
        };
        let mut out = Vec::new();
        assert!(matches!(
            request(raw.as_bytes(), &fwd, &mut out),
            Parsed::Done(_)
        ));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nContent-Length: 0\r\n\
             X-Forwarded-For: 6.6.6.6, 7.7.7.7, 8.8.8.8, 10.0.0.7\r\n\
             X-Forwarded-Proto: https\r\nX-Forwarded-Host: a\r\n\r\n"
        );
    }

    #[test]
    fn a_client_cannot_spoof_forwarding_headers_or_glue_lines_together() {
        let raw = "POST / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\n\
                   Forwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\n\
                   X-Forwarded-Host: evil\r\nContent-Length: 3\r\n\r\nabc";
        let (p, out) = forward(raw);
        assert!(
            matches!(p, Parsed::Done(RequestHead { body: 3, .. })),
            "{p:?}"
        );
        assert!(!out.contains("6.6.6.6") && !out.contains("evil"), "{out}");
        assert!(out.contains("\r\nContent-Length: 3\r\n"), "{out}");
        // Every line of the head is a header line: nothing glued, nothing nameless.
        for line in out.trim_end().lines().skip(1) {
            assert!(
                line.split_once(": ").is_some_and(|(n, _)| !n.is_empty()),
                "{line:?}"
            );
        }
    }

    #[test]
    fn a_connection_header_cannot_drop_host_or_the_length() {
        let (p, out) = forward(
            "POST / HTTP/1.1\r\nHost: a\r\nConnection: content-length, host\r\n\
             Content-Length: 69\r\n\r\n",
        );
        assert!(
            matches!(p, Parsed::Done(RequestHead { body: 69, .. })),
            "{p:?}"
        );
        assert!(out.contains("\r\nHost: a\r\n"), "{out}");
        assert!(out.contains("\r\nContent-Length: 69\r\n"), "{out}");
    }

    #[test]
    fn what_this_path_does_not_forward_goes_to_hyper() {
        for raw in [
            "GET / HTTP/1.0\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        ] {
            assert_eq!(forward(raw).0, Parsed::Other, "{raw:?}");
        }
        assert_eq!(forward("GET / HTTP/1.1\r\nHost: a").0, Parsed::Partial);
        let huge = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(forward(&huge).0, Parsed::Other);
    }

    #[test]
    fn what_no_path_forwards_is_refused() {
        for raw in [
            "CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
        ] {
            assert!(matches!(forward(raw).0, Parsed::Refused(_)), "{raw:?}");
        }
    }

    #[test]
    fn a_body_length_and_close_are_read() {
        let (p, _) = forward(
            "POST /u HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 12\r\nConnection: close\r\n\r\n",
        );
        let Parsed::Done(head) = p else {
            panic!("{p:?}")
        };
        assert_eq!(head.body, 12);
        assert!(head.close && !head.idempotent);
        assert!(head.host.is_some());
    }

    fn answer_of(raw: &str, head_request: bool) -> (Result<Parsed<AnswerHead>, BadAnswer>, String) {
        let mut out = Vec::new();
        let p = answer(raw.as_bytes(), head_request, &mut out);
        (p, String::from_utf8(out).unwrap())
    }

    #[test]
    fn an_answer_keeps_its_framing_and_loses_hop_headers() {
        let (p, out) = answer_of(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX: y\r\n\r\nhello",
            false,
        );
        let Ok(Parsed::Done(h)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(
            (h.status, h.framing, h.reusable),
            (200, Framing::Length(5), true)
        );
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n");

        let (p, out) = answer_of(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
            false,
        );
        let Ok(Parsed::Done(h)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(h.framing, Framing::chunked());
        assert_eq!(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n");

        let (p, _) = answer_of("HTTP/1.0 200 OK\r\n\r\nuntil close", false);
        let Ok(Parsed::Done(h)) = p else {
            panic!("{p:?}")
        };
        assert_eq!((h.framing, h.reusable), (Framing::Close, false));

        let (p, _) = answer_of("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true);
        assert!(matches!(
            p,
            Ok(Parsed::Done(AnswerHead {
                framing: Framing::Length(0),
                ..
            }))
        ));
        let (p, _) = answer_of(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            false,
        );
        assert!(matches!(
            p,
            Ok(Parsed::Done(AnswerHead {
                framing: Framing::Length(0),
                ..
            }))
        ));
        let (p, _) = answer_of(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false,
        );
        assert!(matches!(
            p,
            Ok(Parsed::Done(AnswerHead {
                reusable: false,
                ..
            }))
        ));
    }

    #[test]
    fn a_broken_answer_is_refused() {
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(answer_of(raw, false).0.is_err(), "{raw:?}");
        }
        assert_eq!(
            answer_of("HTTP/1.1 200 OK\r\n", false).0,
            Ok(Parsed::Partial)
        );
    }
}
