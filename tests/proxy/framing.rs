//! `pier proxy` against nginx, case by case: each case is sent as raw bytes to both,
//! each in front of its own recording app (the same strict server), and Pier's app must
//! never see a request that nginx's does not; a request nginx refuses never reaches
//! Pier's app either. Whatever reaches Pier's app is unambiguous (the strict reader
//! refused nothing), carries one `Host` and Pier's own forwarding headers. After each
//! case an honest request gets its answer, on a fresh connection and on the case's own
//! connection when it is still open.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(10);

/// A request the app would read as a second one, if a proxy let its body through as such.
const SMUGGLED: &str =
    "GET /SMUGGLED HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";

fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let s = SMUGGLED.len();
    let text = |name: &'static str, raw: String| (name, raw.into_bytes());
    vec![
        text("xff glues the next header", "GET /xff HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n".into()),
        text("xff swallows the length", format!("POST /xff-cl HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Length: {s}\r\n\r\n{SMUGGLED}")),
        text("connection: content-length", format!("POST /conn-cl HTTP/1.1\r\nHost: app.test\r\nConnection: content-length\r\nContent-Length: {s}\r\n\r\n{SMUGGLED}")),
        text("connection: host", "GET /conn-host HTTP/1.1\r\nHost: app.test\r\nConnection: host\r\n\r\n".into()),
        text("connection: host on hyper's path", "GET /conn-host-10 HTTP/1.0\r\nHost: app.test\r\nConnection: host\r\n\r\n".into()),
        text("two hosts", "GET /two-hosts HTTP/1.1\r\nHost: app.test\r\nHost: other.test\r\n\r\n".into()),
        text("two equal hosts", "GET /two-hosts HTTP/1.1\r\nHost: app.test\r\nHost: app.test\r\n\r\n".into()),
        text("spoofed forwarding headers", "GET /spoof HTTP/1.1\r\nHost: app.test\r\nForwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n".into()),
        text("chunk size overflows", "POST /chunk HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF1\r\nabc\r\n0\r\n\r\n".into()),
        text("chunk size not hex", "POST /chunk HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n".into()),
        text("chunk lines LF only", "POST /chunk HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n".into()),
        text("connect", "CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\n".into()),
        text("trace", "TRACE / HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("cl.te", "POST /clte HTTP/1.1\r\nHost: app.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG".into()),
        text("te.cl", format!("POST /tecl HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", s)),
        text("two lengths", "POST /cl HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".into()),
        text("signed length", "POST /cl HTTP/1.1\r\nHost: app.test\r\nContent-Length: +3\r\n\r\nabc".into()),
        text("listed length", "POST /cl HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3, 3\r\n\r\nabc".into()),
        text("te not chunked", "POST /te HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n".into()),
        text("te obfuscated", "POST /te HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n".into()),
        text("te space before colon", "POST /te HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n".into()),
        text("obs-fold", "GET /fold HTTP/1.1\r\nHost: app.test\r\nX-A: a\r\n b\r\n\r\n".into()),
        text("lf-only head", "GET /lf HTTP/1.1\nHost: app.test\n\n".into()),
        text("bare cr", "GET /cr HTTP/1.1\rHost: app.test\r\n\r\n".into()),
        text("no host", "GET /no-host HTTP/1.1\r\n\r\n".into()),
        text("host with a path", "GET /bad-host HTTP/1.1\r\nHost: app.test/x\r\n\r\n".into()),
        text("absolute form", "GET http://app.test/abs HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("http/1.0 with a body", "POST /old HTTP/1.0\r\nHost: app.test\r\nContent-Length: 3\r\n\r\nabc".into()),
        text("expect", "POST /expect HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc".into()),
        text("pipelined across the hand-over", "GET /p1 HTTP/1.1\r\nHost: app.test\r\n\r\nPOST /p2 HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /p3 HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("huge head", format!("GET /huge HTTP/1.1\r\nHost: app.test\r\nX-Big: {}\r\n\r\n", "a".repeat(70_000))),
        text("answer: signed length", "GET /answer/plus-length HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("answer: two lengths", "GET /answer/two-lengths HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("answer: listed length", "GET /answer/list-length HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("answer: space in a name", "GET /answer/space-in-name HTTP/1.1\r\nHost: app.test\r\n\r\n".into()),
        text("answer: signed length on hyper's path", "GET /answer/plus-length HTTP/1.0\r\nHost: app.test\r\n\r\n".into()),
        text("answer: two lengths on hyper's path", "GET /answer/two-lengths HTTP/1.0\r\nHost: app.test\r\n\r\n".into()),
        text("answer: listed length on hyper's path", "GET /answer/list-length HTTP/1.0\r\nHost: app.test\r\n\r\n".into()),
    ]
}

/// What Pier's client must get for some cases, whatever nginx does.
fn expected_status(case: &str) -> Option<&'static [u16]> {
    Some(match case {
        "two hosts" | "two equal hosts" | "no host" | "host with a path" => &[400],
        "chunk size overflows" | "chunk size not hex" | "chunk lines LF only" => &[400],
        "connect" | "trace" => &[405, 400],
        c if c.starts_with("answer:") => &[502],
        _ => return None,
    })
}

/// What one case did through one proxy.
struct Outcome {
    /// The answers' status codes, in order.
    statuses: Vec<u16>,
    /// The connection was still open once the answers stopped coming.
    open: Option<TcpStream>,
}

/// Sends `raw` on a fresh connection and reads answers until the proxy closes it, or no
/// more come for a short while after a complete one.
async fn send_case(addr: SocketAddr, raw: &[u8]) -> Outcome {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The peer may close before it read everything (a refused head): not an error here.
    let _ = s.write_all(raw).await;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let deadline = Instant::now() + DEADLINE;
    let mut open = true;
    while Instant::now() < deadline {
        let quiet = if complete_answers(&got).is_empty() {
            DEADLINE
        } else {
            Duration::from_millis(300)
        };
        match tokio::time::timeout(quiet, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) => {
                open = false;
                break;
            }
            Err(_) => break,
        }
    }
    Outcome {
        statuses: complete_answers(&got),
        open: open.then_some(s),
    }
}

/// The status codes of the answer heads in `bytes` (bodies skipped by their length).
fn complete_answers(mut bytes: &[u8]) -> Vec<u16> {
    let mut statuses = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let Some(status) = head.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok()) else {
            break;
        };
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        statuses.push(status);
        bytes = &bytes[(end + 4 + length).min(bytes.len())..];
    }
    statuses
}

/// An honest request gets its own answer, on `s` or on a fresh connection to `addr`.
async fn honest(addr: SocketAddr, s: Option<TcpStream>, path: &str) -> Result<(), String> {
    let s = match s {
        Some(s) => s,
        None => TcpStream::connect(addr).await.map_err(|e| e.to_string())?,
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    let text = exchange_to_close(s, &req, DEADLINE).await?;
    let want = format!("ok GET {path}");
    if text.starts_with("HTTP/1.1 200") && text.ends_with(&want) {
        Ok(())
    } else {
        Err(format!("honest {path} got {text:?}"))
    }
}

/// The requests an app saw since `from`, without the honest ones, as (method, target).
fn requests_since(app: &RecordingApp, from: usize) -> (Vec<(String, String)>, Vec<Seen>) {
    let seen = app.seen();
    let new: Vec<Seen> = seen.into_iter().skip(from).collect();
    let requests = new
        .iter()
        .filter_map(|s| match s {
            Seen::Request(r) if !r.target.starts_with("/honest/") => {
                Some((r.method.clone(), r.target.clone()))
            }
            _ => None,
        })
        .collect();
    (requests, new)
}

/// What reaches Pier's app is unambiguous and carries Pier's own forwarding headers.
fn check_pier_request(case: &str, r: &Recorded) -> Result<(), String> {
    let fail = |why: String| {
        Err(format!(
            "{case}: {why}: {:?}",
            String::from_utf8_lossy(&r.raw)
        ))
    };
    if r.header("x-forwarded-for") != ["127.0.0.1"] {
        return fail("X-Forwarded-For is not the peer alone".into());
    }
    for spoofable in ["forwarded", "x-real-ip", "x_forwarded_for"] {
        if !r.header(spoofable).is_empty() {
            return fail(format!("{spoofable} reached the app"));
        }
    }
    if r.headers
        .iter()
        .any(|(n, _)| n.is_empty() || n.contains('_'))
    {
        return fail("a header with no name or an underscore".into());
    }
    Ok(())
}

#[tokio::test]
async fn pier_never_forwards_a_request_nginx_would_not() {
    let (pier_app, nginx_app) = (RecordingApp::start().await, RecordingApp::start().await);
    let pier = PierProxy::start(pier_app.addr, "").await;
    let nginx = Nginx::start(nginx_app.addr).await;
    let mut problems = Vec::new();
    for (i, (case, raw)) in cases().into_iter().enumerate() {
        let (p0, n0) = (pier_app.seen().len(), nginx_app.seen().len());
        let via_nginx = send_case(nginx.listen, &raw).await;
        let via_pier = send_case(pier.listen, &raw).await;
        for (who, addr, out) in [
            ("nginx", nginx.listen, via_nginx.open),
            ("pier", pier.listen, via_pier.open),
        ] {
            if let Err(e) = honest(addr, None, &format!("/honest/{i}/fresh")).await {
                problems.push(format!("{case}: via {who}, a fresh connection: {e}"));
            }
            if out.is_some()
                && who == "pier"
                && let Err(e) = honest(addr, out, &format!("/honest/{i}/same")).await
            {
                problems.push(format!("{case}: via pier, the same connection: {e}"));
            }
        }
        let (pier_saw, pier_all) = requests_since(&pier_app, p0);
        let (nginx_saw, _) = requests_since(&nginx_app, n0);
        eprintln!(
            "{case:32} nginx {:?} app {:?} | pier {:?} app {:?}",
            via_nginx.statuses, nginx_saw, via_pier.statuses, pier_saw
        );
        for r in &pier_saw {
            if !nginx_saw.contains(r) {
                problems.push(format!("{case}: pier's app saw {r:?}, nginx's did not"));
            }
        }
        for s in &pier_all {
            match s {
                Seen::Refused(why) => problems.push(format!("{case}: pier's app refused: {why}")),
                Seen::Request(r) => problems.extend(check_pier_request(case, r).err()),
            }
        }
        if let Some(want) = expected_status(case)
            && !via_pier.statuses.first().is_some_and(|s| want.contains(s))
        {
            problems.push(format!(
                "{case}: pier answered {:?}, not {want:?}",
                via_pier.statuses
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\npier log:\n{}\nnginx error log:\n{}",
        problems.join("\n"),
        pier.process.log(),
        nginx.error_log()
    );
}
