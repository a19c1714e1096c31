//! HTTP/1.1 forwarding as bytes: a request head is parsed once, rewritten for the app
//! (hop-by-hop headers out, `X-Forwarded-*` in) and written with its body in one write; the
//! answer's head is rewritten the same way and its body passes through unchanged, with
//! its end found from its framing. No header map, no re-encoding, no hand-over between
//! tasks: the client connection's task owns its kept-alive connection to the app.
//!
//! This is the path almost every request takes. What it does not handle (HTTP/2, HTTP/1.0,
//! upgrades, `Expect`, chunked uploads, malformed heads) is handed, with the bytes already
//! read, to hyper's server at a request boundary: see [`head::Parsed::Other`].

mod body;
mod head;
#[cfg(test)]
mod reference;

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_util::sync::CancellationToken;

pub use body::Prefixed;
pub use body::{BadChunk, Framing, Progress};
pub use head::AnswerHead;
pub use head::MAX_HEAD;
pub use head::{
    BadAnswer, Forwarding as ForwardingValues, Parsed as ParsedHead, RequestHead as Request,
    answer as parse_answer, request as parse_request,
};
use head::{Forwarding, Parsed, RequestHead};

use super::forward::{Client, RETRYABLE_BODY, page_html};
use super::rules::Refusal;
use super::table::{Entry, InFlight};
use super::upstream::CONNECT_TIMEOUT;

/// How long a connection idle when the proxy stops may still bring one more request.
const IDLE_GRACE: Duration = Duration::from_secs(2);

/// Bytes read from a socket at a time.
const READ_SIZE: usize = 16 * 1024;

/// How a client connection served here ended.
pub(crate) enum End<IO> {
    Closed,
    /// The next request is for hyper's server, with the bytes already read.
    Handoff(Prefixed<IO>),
}

/// A kept-alive connection to one generation of an app, holding one of its app's
/// connection permits while open.
struct Upstream {
    target: String,
    stream: TcpStream,
    buf: BytesMut,
    _permit: OwnedSemaphorePermit,
}

#[derive(Debug, thiserror::Error)]
enum SendError {
    /// Nothing reached the app.
    #[error("cannot connect")]
    Connect,
    /// The connection ended before any byte of an answer.
    #[error("the connection closed without an answer")]
    NoAnswer,
    #[error("the connection failed: {0}")]
    Failed(String),
    /// The client went away while its body was being sent.
    #[error("the client went away")]
    ClientGone,
    /// The app has `proxy.max_upstream_connections` open and none came free in time.
    #[error("too many connections to the app")]
    Busy,
}

/// Whether the client connection carries another request.
enum Flow {
    Keep,
    Close,
}

struct Conn<'a, IO> {
    client: &'a Client,
    /// Cancelled when the proxy stops: every answer from then on closes its connection.
    stop: &'a CancellationToken,
    io: IO,
    /// Bytes from the client not yet forwarded.
    buf: BytesMut,
    /// The request for the app: head, and the body when it is small.
    out: Vec<u8>,
    /// The answer's head for the client, and the first bytes of its body.
    reply: Vec<u8>,
    upstream: Option<Upstream>,
}

/// Serves requests on `io` until the client closes, `stop` is cancelled (at a request
/// boundary), or a request for hyper's server arrives.
pub(crate) async fn serve<IO>(io: IO, client: &Client, stop: &CancellationToken) -> End<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut c = Conn {
        client,
        stop,
        io,
        buf: BytesMut::with_capacity(READ_SIZE),
        out: Vec::with_capacity(1024),
        reply: Vec::with_capacity(1024),
        upstream: None,
    };
    loop {
        let head = match c.next_head().await {
            Next::Head(h) => h,
            Next::Closed => break,
            Next::Other => {
                return End::Handoff(Prefixed::new(c.buf.split().freeze(), c.io));
            }
            Next::Refused(r) => {
                c.refuse(r).await;
                break;
            }
        };
        match c.exchange(head).await {
            Flow::Keep if !stop.is_cancelled() => {}
            _ => break,
        }
    }
    // A TLS client gets its close_notify; a plain one its FIN.
    let _ = timeout(Duration::from_secs(1), c.io.shutdown()).await;
    linger(&mut c.io).await;
    End::Closed
}

/// Reads what the client still sends after the proxy's last answer, for a short while:
/// closing with unread bytes would reset the connection, and the client could lose the
/// answer (a 400 to a request whose body it is still sending).
async fn linger<IO: AsyncRead + Unpin>(io: &mut IO) {
    const LINGER: Duration = Duration::from_secs(2);
    const LINGER_BYTES: usize = 1 << 20;
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    let mut read = 0;
    while read < LINGER_BYTES {
        match timeout_at(deadline, io.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => read += n,
            _ => return,
        }
    }
}

enum Next {
    Head(RequestHead),
    Closed,
    Other,
    Refused(Refusal),
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<'_, IO> {
    /// The next request's head, within the header deadline. A connection idle between
    /// requests when the proxy stops still takes one more request for [`IDLE_GRACE`]
    /// (answered with `Connection: close`): closing it at once would race a request the
    /// client is sending on it, which it then could not know to retry.
    async fn next_head(&mut self) -> Next {
        let stop = self.stop;
        let fwd = Forwarding {
            peer_ip: self.client.peer_ip.as_bytes(),
            tls: self.client.tls,
            trusted: self.client.trusted,
        };
        let mut deadline = Instant::now() + super::HEADER_TIMEOUT;
        let mut graced = false;
        loop {
            if !self.buf.is_empty() {
                match head::request(&self.buf, &fwd, &mut self.out) {
                    Parsed::Done(h) => return Next::Head(h),
                    Parsed::Other => return Next::Other,
                    Parsed::Refused(r) => return Next::Refused(r),
                    Parsed::Partial => {}
                }
            }
            let idle = self.buf.is_empty();
            self.buf.reserve(READ_SIZE);
            let read = tokio::select! {
                r = timeout_at(deadline, self.io.read_buf(&mut self.buf)) => r,
                _ = stop.cancelled(), if idle && !graced => {
                    graced = true;
                    deadline = deadline.min(Instant::now() + IDLE_GRACE);
                    continue;
                }
            };
            if !matches!(read, Ok(Ok(n)) if n > 0) {
                return Next::Closed;
            }
        }
    }

    /// Forwards one request and its answer.
    async fn exchange(&mut self, head: RequestHead) -> Flow {
        let entry = {
            let host = head
                .host
                .and_then(|(s, e)| std::str::from_utf8(&self.buf[s..e]).ok());
            let table = self.client.shared.table();
            table.find(self.client.local, host).cloned()
        };
        let refusal = match &entry {
            None => Some((StatusCode::NOT_FOUND, "No app is routed here.")),
            Some(e) if e.upstream.is_none() => Some((
                StatusCode::SERVICE_UNAVAILABLE,
                "This app has no running version yet.",
            )),
            Some(e) if head.body > e.max_body => Some((
                StatusCode::PAYLOAD_TOO_LARGE,
                "The request body is too large.",
            )),
            Some(_) => None,
        };
        let (Some(entry), None) = (entry, refusal) else {
            let (status, text) = refusal.expect("no entry is a refusal");
            self.buf.advance(head.len);
            // The request's body is left unread: the connection then closes.
            let close = head.body > 0 || head.close;
            return self.page(status, text, &head, close).await;
        };

        // A small body is read first, so that the request can go to the standby too.
        let in_buf = if head.body <= RETRYABLE_BODY {
            let want = head.len + head.body as usize;
            let deadline = Instant::now() + entry.timeout;
            while self.buf.len() < want {
                self.buf.reserve(READ_SIZE);
                let read = timeout_at(deadline, self.io.read_buf(&mut self.buf)).await;
                if !matches!(read, Ok(Ok(n)) if n > 0) {
                    return Flow::Close;
                }
            }
            head.body as usize
        } else {
            (self.buf.len() - head.len).min(head.body as usize)
        };
        self.out
            .extend_from_slice(&self.buf[head.len..head.len + in_buf]);
        self.buf.advance(head.len + in_buf);
        let streamed = head.body - in_buf as u64;
        self.attempts(&entry, &head, streamed).await
    }

    /// The serving generation, then (for what cannot have reached it) the standby.
    async fn attempts(&mut self, entry: &Entry, head: &RequestHead, streamed: u64) -> Flow {
        let shared = &self.client.shared;
        let mut last_error = String::new();
        for attempt in entry.attempts() {
            let (target, is_last) = (attempt.target, attempt.is_last);
            let guard = attempt.start(&shared.counters);
            let sent = timeout(entry.timeout, self.send(target, entry, head, streamed)).await;
            match sent {
                Ok(Ok((up, answer))) => return self.relay(up, answer, head, guard).await,
                Ok(Err(SendError::ClientGone)) => return Flow::Close,
                Ok(Err(SendError::Busy)) => {
                    let text = "The app is busy. Try again in a moment.";
                    let close = streamed > 0 || head.close;
                    return self
                        .page(StatusCode::SERVICE_UNAVAILABLE, text, head, close)
                        .await;
                }
                Ok(Err(e)) => {
                    // Retry only what cannot have reached the app: a refused connection,
                    // or an idempotent request (with its whole body at hand) unanswered.
                    let unreached = matches!(e, SendError::Connect)
                        || (head.idempotent && streamed == 0 && !matches!(e, SendError::Failed(_)));
                    last_error = e.to_string();
                    drop(guard);
                    if !unreached || is_last {
                        break;
                    }
                    tracing::debug!(app = %entry.app, %target, "upstream unreachable; trying the standby");
                }
                Err(_) => {
                    let text = "The app did not answer in time.";
                    let close = streamed > 0 || head.close;
                    return self
                        .page(StatusCode::GATEWAY_TIMEOUT, text, head, close)
                        .await;
                }
            }
        }
        shared.log_unreachable(&entry.app, &last_error);
        let text = "The app could not be reached. Try again in a moment.";
        let close = streamed > 0 || head.close;
        self.page(StatusCode::BAD_GATEWAY, text, head, close).await
    }

    /// Sends the request to `target` (on the kept-alive connection when it is to the same
    /// address and still open) and reads the answer's head. 1xx answers are passed on.
    async fn send(
        &mut self,
        target: &str,
        entry: &Entry,
        head: &RequestHead,
        streamed: u64,
    ) -> Result<(Upstream, AnswerHead), SendError> {
        let mut idle = self.take_idle(target);
        loop {
            let reused = idle.is_some();
            let mut up = match idle.take() {
                Some(up) => up,
                None => connect(target, entry).await?,
            };
            let sent = match up.stream.write_all(&self.out).await {
                Ok(()) => self.stream_body(&mut up.stream, streamed).await,
                Err(_) => Err(SendError::NoAnswer),
            };
            let answered = match sent {
                Ok(()) => self.read_answer(&mut up, head.head_only).await,
                Err(e) => Err(e),
            };
            match answered {
                Ok(answer) => return Ok((up, answer)),
                // A kept-alive connection the app closed as this request went out: once
                // more on a fresh one, when nothing can have been processed twice.
                Err(SendError::NoAnswer) if reused && streamed == 0 && head.idempotent => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Copies the rest of a large body from the client to the app, exactly its length:
    /// what follows it is the client's next request.
    async fn stream_body(&mut self, to: &mut TcpStream, mut left: u64) -> Result<(), SendError> {
        while left > 0 {
            if self.buf.is_empty() {
                self.buf.reserve(READ_SIZE);
                match self.io.read_buf(&mut self.buf).await {
                    Ok(n) if n > 0 => {}
                    _ => return Err(SendError::ClientGone),
                }
            }
            let n = (self.buf.len() as u64).min(left) as usize;
            to.write_all(&self.buf[..n])
                .await
                .map_err(|e| SendError::Failed(e.to_string()))?;
            self.buf.advance(n);
            left -= n as u64;
        }
        Ok(())
    }

    async fn read_answer(
        &mut self,
        up: &mut Upstream,
        head_only: bool,
    ) -> Result<AnswerHead, SendError> {
        let mut got_any = false;
        loop {
            self.reply.clear();
            match head::answer(&up.buf, head_only, &mut self.reply) {
                Ok(Parsed::Done(a)) if (100..200).contains(&a.status) => {
                    self.reply.extend_from_slice(b"\r\n");
                    up.buf.advance(a.len);
                    self.io
                        .write_all(&self.reply)
                        .await
                        .map_err(|_| SendError::ClientGone)?;
                }
                Ok(Parsed::Done(a)) => return Ok(a),
                Ok(Parsed::Partial | Parsed::Other | Parsed::Refused(_)) => {
                    up.buf.reserve(READ_SIZE);
                    match up.stream.read_buf(&mut up.buf).await {
                        Ok(n) if n > 0 => got_any = true,
                        Ok(_) | Err(_) if !got_any => return Err(SendError::NoAnswer),
                        Ok(_) => return Err(SendError::Failed("the answer was cut short".into())),
                        Err(e) => return Err(SendError::Failed(e.to_string())),
                    }
                }
                Err(bad) => return Err(SendError::Failed(bad.to_string())),
            }
        }
    }

    /// Passes the answer on: its head, then its body until its framing says it ended. The
    /// request counts as in flight (for the drain) until then.
    async fn relay(
        &mut self,
        mut up: Upstream,
        answer: AnswerHead,
        head: &RequestHead,
        _guard: InFlight,
    ) -> Flow {
        let mut framing = answer.framing;
        let close = head.close || framing == Framing::Close || self.stop.is_cancelled();
        if close {
            self.reply.extend_from_slice(b"Connection: close\r\n");
        }
        self.reply.extend_from_slice(b"\r\n");
        up.buf.advance(answer.len);
        let Ok(first) = framing.take(&up.buf) else {
            return Flow::Close;
        };
        self.reply.extend_from_slice(&up.buf[..first.used]);
        up.buf.advance(first.used);
        if self.io.write_all(&self.reply).await.is_err() {
            return Flow::Close;
        }
        let mut done = first.done;
        let mut clean = up.buf.is_empty();
        while !done {
            up.buf.clear();
            up.buf.reserve(READ_SIZE);
            match up.stream.read_buf(&mut up.buf).await {
                Ok(0) if framing == Framing::Close => break,
                // Cut short by the app: the client must not take it for whole.
                Ok(0) | Err(_) => return Flow::Close,
                Ok(_) => {}
            }
            let Ok(p) = framing.take(&up.buf) else {
                return Flow::Close;
            };
            if self.io.write_all(&up.buf[..p.used]).await.is_err() {
                return Flow::Close;
            }
            clean = p.used == up.buf.len();
            up.buf.clear();
            done = p.done;
        }
        if answer.reusable && clean && framing.is_done() {
            self.upstream = Some(up);
        }
        if close { Flow::Close } else { Flow::Keep }
    }

    /// The kept-alive connection, if it goes to `target` and the app has not closed it.
    /// One to any other address is dropped: nothing keeps a retired generation's
    /// connections open after a switch.
    fn take_idle(&mut self, target: &str) -> Option<Upstream> {
        let up = self.upstream.take()?;
        if up.target != target {
            return None;
        }
        let mut probe = [0u8; 1];
        match up.stream.try_read(&mut probe) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(up),
            // Closed by the app, or bytes nobody asked for: not reusable.
            _ => None,
        }
    }

    /// Answers a request no path may forward; the connection then closes, with whatever
    /// the client sent after the head unread by any app.
    async fn refuse(&mut self, r: Refusal) {
        let head = RequestHead {
            len: 0,
            body: 0,
            close: true,
            idempotent: false,
            head_only: false,
            host: None,
        };
        self.buf.clear();
        self.page(r.status, r.text, &head, true).await;
    }

    /// A short page of the proxy's own, for when no app answers: never a hang.
    async fn page(
        &mut self,
        status: StatusCode,
        text: &str,
        head: &RequestHead,
        close: bool,
    ) -> Flow {
        let close = close || self.stop.is_cancelled();
        let html = page_html(status, text);
        self.reply.clear();
        self.reply.extend_from_slice(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Cache-Control: no-store\r\nContent-Length: {}\r\n{}\r\n",
                html.len(),
                if close { "Connection: close\r\n" } else { "" },
            )
            .as_bytes(),
        );
        if !head.head_only {
            self.reply.extend_from_slice(html.as_bytes());
        }
        match self.io.write_all(&self.reply).await {
            Ok(()) if !close => Flow::Keep,
            _ => Flow::Close,
        }
    }
}

async fn connect(target: &str, entry: &Entry) -> Result<Upstream, SendError> {
    let permit = super::upstream::permit(&entry.conns)
        .await
        .map_err(|_| SendError::Busy)?;
    let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(|_| SendError::Connect)?
        .map_err(|_| SendError::Connect)?;
    let _ = stream.set_nodelay(true);
    Ok(Upstream {
        target: target.to_owned(),
        stream,
        buf: BytesMut::with_capacity(READ_SIZE),
        _permit: permit,
    })
}
