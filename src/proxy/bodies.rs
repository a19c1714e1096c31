//! Bodies on the hyper path: a request body read ahead (so that a small one can be sent
//! again to the standby, and a malformed chunked one is refused before any of it reaches
//! an app), the rest streamed with its failures remembered, and an answer body counted in
//! flight until it ends.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::table::InFlight;

/// What the proxy sends on, either way: a body read ahead or one streamed through.
pub type ProxyBody = BoxBody<Bytes, BoxError>;
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a streamed request body failed, as the proxy answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum BodyFailure {
    None = 0,
    /// The client's framing was broken (a malformed chunk, a short body): 400.
    Malformed = 1,
    /// More than the route's `max_body`: 413.
    TooLarge = 2,
}

/// Where a streamed body records how it failed, for the answer to the client.
#[derive(Debug, Default, Clone)]
pub(crate) struct Failure(Arc<AtomicU8>);

impl Failure {
    fn set(&self, f: BodyFailure) {
        self.0.store(f as u8, Ordering::SeqCst);
    }

    pub(crate) fn get(&self) -> BodyFailure {
        match self.0.load(Ordering::SeqCst) {
            1 => BodyFailure::Malformed,
            2 => BodyFailure::TooLarge,
            _ => BodyFailure::None,
        }
    }
}

/// A request body as read ahead: whole, or its first bytes and the rest still to come.
pub(crate) enum Ahead {
    Whole(Bytes),
    Partial(Vec<Bytes>, Incoming),
}

/// Reads `body` until it ends or more than `limit` bytes came. Trailers of a chunked
/// upload are not forwarded (nginx drops them too).
pub(crate) async fn read_ahead(mut body: Incoming, limit: usize) -> Result<Ahead, hyper::Error> {
    let mut got = Vec::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        len += data.len();
        got.push(data);
        if len > limit {
            return Ok(Ahead::Partial(got, body));
        }
    }
    if got.len() == 1 {
        return Ok(Ahead::Whole(got.pop().expect("one piece")));
    }
    let mut whole = BytesMut::with_capacity(len);
    for piece in got {
        whole.extend_from_slice(&piece);
    }
    Ok(Ahead::Whole(whole.freeze()))
}

/// The request body for the app: whole (sent again as it is on a retry) or streamed
/// (sent once).
pub(crate) enum Prepared {
    Whole(Bytes),
    Streamed(Option<ProxyBody>),
}

impl Prepared {
    /// The body for one attempt; `None` once a streamed body has been used.
    pub(crate) fn take(&mut self) -> Option<ProxyBody> {
        match self {
            Prepared::Whole(b) => Some(
                Full::new(b.clone())
                    .map_err(|e| -> BoxError { match e {} })
                    .boxed(),
            ),
            Prepared::Streamed(s) => s.take(),
        }
    }
}

/// The read-ahead bytes, then the rest of the client's body, at most `max` bytes in
/// all. Its size is exact when the client's was (a `Content-Length` goes on as one).
pub(crate) fn streamed(
    prefix: Vec<Bytes>,
    rest: Incoming,
    max: u64,
    failure: &Failure,
) -> ProxyBody {
    let seen = prefix.iter().map(|b| b.len() as u64).sum();
    BoxBody::new(Streamed {
        prefix: prefix.into(),
        rest,
        seen,
        max,
        failure: failure.clone(),
    })
}

struct Streamed {
    prefix: VecDeque<Bytes>,
    rest: Incoming,
    seen: u64,
    max: u64,
    failure: Failure,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(b) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if self.seen > self.max {
            self.failure.set(BodyFailure::TooLarge);
            return Poll::Ready(Some(Err("the request body is too large".into())));
        }
        match Pin::new(&mut self.rest).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let Some(data) = frame.data_ref() else {
                    // Trailers are not forwarded.
                    return Poll::Ready(None);
                };
                self.seen += data.len() as u64;
                if self.seen > self.max {
                    self.failure.set(BodyFailure::TooLarge);
                    return Poll::Ready(Some(Err("the request body is too large".into())));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.failure.set(BodyFailure::Malformed);
                Poll::Ready(Some(Err(Box::new(e))))
            }
            other => other.map_err(|e| -> BoxError { Box::new(e) }),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self.prefix.iter().map(|b| b.len() as u64).sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(ahead + rest.lower());
        if let Some(upper) = rest.upper() {
            hint.set_upper(ahead + upper);
        }
        hint
    }
}

/// The app's answer body, counted in flight until it ends or is dropped.
pub(crate) struct Counted {
    pub inner: Incoming,
    pub _guard: InFlight,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(|e| -> BoxError { Box::new(e) })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
