//! An app server that records the exact bytes of every request it gets and refuses
//! (400, then close) anything a strict HTTP/1.1 reader would find ambiguous: bare LF,
//! no `Host` or two, a length that is not digits, both framings, a malformed chunk. What
//! a proxy passes it is what an app behind that proxy would act on.
//!
//! Paths under `/answer/` get a canned malformed answer instead, to see what the proxy
//! passes on to its client.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Request(Recorded),
    /// What the strict reader refused, and why.
    Refused(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    pub target: String,
    /// Header lines as received, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub raw: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[derive(Clone)]
pub struct RecordingApp {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// Bytes one request may take at most, head and body.
const MAX_REQUEST: usize = 4 << 20;

impl RecordingApp {
    pub async fn start() -> RecordingApp {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let app = RecordingApp {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
        };
        let seen = app.seen.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s, seen.clone()));
            }
        });
        app
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut s: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match strict::parse(&buf) {
            strict::Parsed::Partial if buf.len() < MAX_REQUEST => {
                let read = tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk));
                match read.await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
            strict::Parsed::Partial => return,
            strict::Parsed::Bad(why) => {
                seen.lock().unwrap().push(Seen::Refused(why));
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
            strict::Parsed::Done(r, used) => {
                buf.drain(..used);
                let answer = answer_for(&r);
                seen.lock().unwrap().push(Seen::Request(r));
                if s.write_all(&answer).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn answer_for(r: &Recorded) -> Vec<u8> {
    match r.target.as_str() {
        "/answer/plus-length" => b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello".to_vec(),
        "/answer/two-lengths" => {
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec()
        }
        "/answer/list-length" => b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello".to_vec(),
        "/answer/space-in-name" => b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello".to_vec(),
        _ => {
            let body = format!("ok {} {}", r.method, r.target);
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }
    }
}

/// The strict reader: a request is accepted only if there is one way to read it.
pub mod strict {
    use super::Recorded;

    pub enum Parsed {
        Partial,
        Done(Recorded, usize),
        Bad(String),
    }

    pub fn parse(buf: &[u8]) -> Parsed {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            if buf.len() > 64 * 1024 {
                return Parsed::Bad("head too large".into());
            }
            return Parsed::Partial;
        };
        let head = &buf[..end + 4];
        // Every line ends in CRLF; no bare CR or LF anywhere in the head.
        for (i, b) in head.iter().enumerate() {
            let ok = match b {
                b'\n' => i > 0 && head[i - 1] == b'\r',
                b'\r' => head.get(i + 1) == Some(&b'\n'),
                _ => true,
            };
            if !ok {
                return Parsed::Bad("a bare CR or LF in the head".into());
            }
        }
        let mut lines = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut lines);
        match req.parse(head) {
            Ok(httparse::Status::Complete(n)) if n == head.len() => {}
            other => return Parsed::Bad(format!("the head does not parse: {other:?}")),
        }
        let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
            return Parsed::Bad("not an HTTP/1.1 request".into());
        };
        let headers: Vec<(String, String)> = req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let count = |n: &str| headers.iter().filter(|(k, _)| k == n).count();
        let value = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        if count("host") != 1 || value("host").is_some_and(str::is_empty) {
            return Parsed::Bad(format!("{} Host headers", count("host")));
        }
        let rest = &buf[head.len()..];
        let body = match (count("content-length"), count("transfer-encoding")) {
            (0, 0) => Some((Vec::new(), 0)),
            (1, 0) => {
                let v = value("content-length").unwrap();
                if v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Parsed::Bad(format!("Content-Length {v:?}"));
                }
                let n: usize = v.parse().unwrap();
                if rest.len() < n {
                    return Parsed::Partial;
                }
                Some((rest[..n].to_vec(), n))
            }
            (0, 1) if value("transfer-encoding") == Some("chunked") => match chunked(rest) {
                Ok(b) => b,
                Err(why) => return Parsed::Bad(why),
            },
            _ => return Parsed::Bad("ambiguous framing".into()),
        };
        let Some((body, used)) = body else {
            return Parsed::Partial;
        };
        let len = head.len() + used;
        Parsed::Done(
            Recorded {
                method: method.to_owned(),
                target: target.to_owned(),
                headers,
                body,
                raw: buf[..len].to_vec(),
            },
            len,
        )
    }

    /// A chunked body: its bytes and how much of `rest` it took; `None` while partial.
    fn chunked(rest: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") else {
                return Ok(None);
            };
            let line = &rest[at..at + eol];
            let size = line.split(|b| *b == b';').next().unwrap_or(b"");
            if size.is_empty() || size.len() > 8 || !size.iter().all(u8::is_ascii_hexdigit) {
                return Err(format!("chunk size {:?}", String::from_utf8_lossy(line)));
            }
            if line.iter().any(|b| *b == b'\n' || *b == b'\r') {
                return Err("a bare CR or LF in a chunk line".into());
            }
            let n = usize::from_str_radix(std::str::from_utf8(size).unwrap(), 16).unwrap();
            at += eol + 2;
            if n == 0 {
                // No trailers accepted: the next line must be the end.
                return match rest.get(at..at + 2) {
                    None => Ok(None),
                    Some(b"\r\n") => Ok(Some((body, at + 2))),
                    Some(_) => Err("trailers".into()),
                };
            }
            if rest.len() < at + n + 2 {
                return Ok(None);
            }
            if &rest[at + n..at + n + 2] != b"\r\n" {
                return Err("chunk data not followed by CRLF".into());
            }
            body.extend_from_slice(&rest[at..at + n]);
            at += n + 2;
        }
    }
}
