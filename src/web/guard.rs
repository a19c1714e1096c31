//! What stands between the open internet and intake: a cap on the webhook body bytes held
//! in memory at once,
//! a per-address brake on failed authentications, and a log that counts a flood of
//! rejections instead of writing a line for each. All in memory, all bounded; none of it
//! writes to the database, and none of it runs a timer: an idle Pier does nothing here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::log_budget::LogBudget;

/// Failed authentications an address may have per [`WINDOW`] before its requests are
/// refused unchecked (429) until the window ends.
const FAILURES_PER_WINDOW: u32 = 20;
const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; beyond that, expired ones are dropped first, then the
/// table stops growing (new addresses are not braked rather than memory growing).
const MAX_ADDRESSES: usize = 10_000;
/// Rejections logged one by one per [`LOG_WINDOW`]; the rest are summed up.
const LOGGED_PER_WINDOW: u64 = 5;
const LOG_WINDOW: Duration = Duration::from_secs(10);

pub struct Guard {
    /// One permit per byte of webhook body held in memory, across all requests. A body
    /// trickled slowly holds only what has arrived, so slow senders cannot starve honest
    /// ones; many large bodies at once get 503 instead of growing memory.
    bytes: std::sync::Arc<Semaphore>,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    log: LogBudget,
}

impl Guard {
    pub fn new(buffer_bytes: usize) -> Self {
        Self {
            bytes: std::sync::Arc::new(Semaphore::new(buffer_bytes.min(Semaphore::MAX_PERMITS))),
            failures: Mutex::new(HashMap::new()),
            log: LogBudget::new(LOGGED_PER_WINDOW, LOG_WINDOW),
        }
    }

    /// Reads a webhook body of at most `max` bytes, each byte counted against the shared
    /// buffer as it arrives. The returned hold gives the bytes back when dropped.
    pub(crate) async fn read_body(
        &self,
        mut body: Body,
        max: usize,
    ) -> Result<(Bytes, Hold), BodyError> {
        let mut buf = Vec::new();
        let mut hold = Hold(Vec::new());
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| BodyError::Unreadable)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if buf.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            let n = u32::try_from(data.len()).map_err(|_| BodyError::TooLarge)?;
            let permit = self
                .bytes
                .clone()
                .try_acquire_many_owned(n)
                .map_err(|_| BodyError::Busy)?;
            hold.0.push(permit);
            buf.extend_from_slice(&data);
        }
        Ok((Bytes::from(buf), hold))
    }

    /// Whether `addr` failed to authenticate too often lately.
    pub(crate) fn throttled(&self, addr: Option<IpAddr>) -> bool {
        let Some(addr) = addr else { return false };
        let map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&addr)
            .is_some_and(|(since, n)| since.elapsed() < WINDOW && *n >= FAILURES_PER_WINDOW)
    }

    pub(crate) fn record_failure(&self, addr: Option<IpAddr>) {
        let Some(addr) = addr else { return };
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            map.retain(|_, (since, _)| since.elapsed() < WINDOW);
            if map.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let entry = map.entry(addr).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }

    /// Whether this rejection gets its own log line. When a new window starts, the number
    /// left out of the previous one is logged once, as a summary.
    pub(crate) fn log_rejection(&self) -> bool {
        let admit = self.log.admit();
        if admit.left_out > 0 {
            tracing::warn!(
                suppressed = admit.left_out,
                window_s = self.log.window().as_secs(),
                "more webhooks were rejected than logged; see pier_webhooks_total"
            );
        }
        admit.log
    }
}

/// Body bytes counted against the shared buffer until this is dropped.
#[derive(Debug)]
pub(crate) struct Hold(#[allow(dead_code)] Vec<OwnedSemaphorePermit>);

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Larger than the route takes: 413.
    TooLarge,
    /// The shared buffer is full: 503, the sender retries.
    Busy,
    /// The connection failed mid-body.
    Unreadable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_braked_after_too_many_failures_and_others_are_not() {
        let g = Guard::new(1);
        let bad: IpAddr = "127.0.0.2".parse().unwrap();
        let good: IpAddr = "127.0.0.3".parse().unwrap();
        for _ in 0..FAILURES_PER_WINDOW {
            assert!(!g.throttled(Some(bad)));
            g.record_failure(Some(bad));
        }
        assert!(g.throttled(Some(bad)));
        assert!(!g.throttled(Some(good)));
        assert!(!g.throttled(None));
    }

    #[test]
    fn a_flood_of_rejections_is_logged_a_few_times_per_window() {
        let g = Guard::new(1);
        let logged = (0..1000).filter(|_| g.log_rejection()).count();
        assert_eq!(logged as u64, LOGGED_PER_WINDOW);
    }

    #[tokio::test]
    async fn body_bytes_held_at_once_are_capped_and_given_back() {
        let g = Guard::new(10);
        let (a, hold) = g.read_body(Body::from("123456"), 100).await.unwrap();
        assert_eq!(&a[..], b"123456");
        assert_eq!(
            g.read_body(Body::from("12345"), 100).await.unwrap_err(),
            BodyError::Busy
        );
        drop(hold);
        assert!(g.read_body(Body::from("12345"), 100).await.is_ok());
        assert_eq!(
            g.read_body(Body::from("12345"), 4).await.unwrap_err(),
            BodyError::TooLarge
        );
    }
}
