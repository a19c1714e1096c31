//! The one backoff every retry loop in Pier uses: exponential, capped, optionally bounded
//! by a deadline, and cancellable. A loop that retries without it has no bound.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
    deadline: Option<Instant>,
}

impl Backoff {
    /// Delays `first`, `2 * first`, ... up to `max`, with no deadline.
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            next: first,
            max,
            deadline: None,
        }
    }

    /// A database that went away (a restart, a failover) or a remote peer that failed
    /// transiently: 200 ms doubling to 5 s, so a short blip is retried at once and a long
    /// outage costs one attempt every 5 s, not a busy loop.
    pub(crate) fn outage() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(5))
    }

    /// A journal or queue write waiting out a database outage inside a run's patience:
    /// 100 ms doubling to 2 s, shorter than [`Backoff::outage`], since a lease is ticking.
    pub(crate) fn store_write() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(2))
    }

    /// Something local that answers within milliseconds once ready (a proxy applying a
    /// route, a loopback health probe): 5 ms doubling to 250 ms, so readiness is seen
    /// almost at once and a slow start is not polled hot.
    pub(crate) fn local_probe() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_millis(250))
    }

    /// Gives up once waiting would pass `budget` from now.
    pub(crate) fn within(mut self, budget: Duration) -> Self {
        self.deadline = Some(Instant::now() + budget);
        self
    }

    /// After a success: the next failure starts from the first delay again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }

    /// Whether the deadline (if any) has passed.
    pub(crate) fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The delay to wait now, or `None` when waiting it would pass the deadline.
    pub(crate) fn next_delay(&mut self) -> Option<Duration> {
        let delay = self.next;
        if self.deadline.is_some_and(|d| Instant::now() + delay > d) {
            return None;
        }
        self.next = (self.next * 2).min(self.max);
        Some(delay)
    }

    /// Waits at least `at_least` (a peer's `Retry-After`), then continues backing off from
    /// there; `None` when that would pass the deadline.
    pub(crate) fn next_delay_at_least(&mut self, at_least: Duration) -> Option<Duration> {
        let delay = self.next_delay()?.max(at_least);
        if self.deadline.is_some_and(|d| Instant::now() + delay > d) {
            return None;
        }
        Some(delay)
    }

    /// Sleeps the next delay. `false`, without sleeping, when the deadline would pass.
    pub(crate) async fn wait(&mut self) -> bool {
        match self.next_delay() {
            Some(d) => {
                tokio::time::sleep(d).await;
                true
            }
            None => false,
        }
    }

    /// Like [`Backoff::wait`], but `false` as soon as `cancel` fires.
    pub(crate) async fn wait_or(&mut self, cancel: &CancellationToken) -> bool {
        let Some(d) = self.next_delay() else {
            return false;
        };
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = cancel.cancelled() => false,
        }
    }
}

/// Runs `op` until it succeeds, fails in a way `retryable` rejects, or `backoff` runs out
/// (then the last error). `on_retry` sees each error that is retried and the delay.
pub(crate) async fn retry<T, E, F, Fut>(
    backoff: Backoff,
    retryable: impl Fn(&E) -> bool,
    on_retry: impl Fn(&E, Duration),
    op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_hinted(backoff, retryable, |_| None, on_retry, op).await
}

/// Like [`retry`], but an error may carry its peer's wish (a `Retry-After`): the wait is
/// at least that long, and a wish that would pass the deadline ends the retries with that
/// error at once instead of hammering a peer that asked for quiet.
pub(crate) async fn retry_hinted<T, E, F, Fut>(
    mut backoff: Backoff,
    retryable: impl Fn(&E) -> bool,
    hint: impl Fn(&E) -> Option<Duration>,
    on_retry: impl Fn(&E, Duration),
    mut op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    loop {
        match op().await {
            Err(e) if retryable(&e) => {
                let delay = match hint(&e) {
                    Some(at_least) => backoff.next_delay_at_least(at_least),
                    None => backoff.next_delay(),
                };
                match delay {
                    Some(delay) => {
                        on_retry(&e, delay);
                        tokio::time::sleep(delay).await;
                    }
                    None => return Err(e),
                }
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_start_over_after_a_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(350));
        let got: Vec<_> = (0..4).map(|_| b.next_delay().unwrap()).collect();
        assert_eq!(got, [ms(100), ms(200), ms(350), ms(350)]);
        b.reset();
        assert_eq!(b.next_delay(), Some(ms(100)));
    }

    #[test]
    fn no_delay_is_offered_past_the_deadline() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(40), ms(1000)).within(ms(100));
        assert_eq!(b.next_delay(), Some(ms(40)));
        // 80 ms more would still fit in 100 ms only if no time passed; 160 cannot.
        let _ = b.next_delay();
        assert_eq!(b.next_delay(), None);
        let mut b = Backoff::new(ms(10), ms(10)).within(ms(50));
        assert_eq!(
            b.next_delay_at_least(ms(500)),
            None,
            "Retry-After past the deadline"
        );
    }

    #[tokio::test]
    async fn retry_stops_at_the_first_error_it_may_not_retry() {
        let ms = Duration::from_millis;
        let mut calls = 0;
        let out: Result<(), &str> = retry(
            Backoff::new(ms(1), ms(1)),
            |e| *e == "transient",
            |_, _| {},
            || {
                calls += 1;
                let e = if calls < 3 { "transient" } else { "permanent" };
                async move { Err(e) }
            },
        )
        .await;
        assert_eq!((out, calls), (Err("permanent"), 3));
    }

    #[tokio::test]
    async fn a_peers_wish_sets_the_wait_and_one_past_the_deadline_ends_it() {
        let ms = Duration::from_millis;
        let started = Instant::now();
        let mut calls = 0;
        let out: Result<(), u64> = retry_hinted(
            Backoff::new(ms(10), ms(10)).within(ms(5_000)),
            |_| true,
            |wish: &u64| Some(ms(*wish)),
            |_, _| {},
            || {
                calls += 1;
                // First asks for 300 ms (fits), then for 60 s (past the deadline).
                let wish = if calls == 1 { 300 } else { 60_000 };
                async move { Err(wish) }
            },
        )
        .await;
        assert_eq!((out, calls), (Err(60_000), 2));
        let waited = started.elapsed();
        // The wish, not the 10 ms backoff; and no wait at all for the wish past the deadline.
        assert!(waited >= ms(300) && waited < ms(3_000), "{waited:?}");
    }

    #[tokio::test]
    async fn a_cancelled_wait_returns_at_once() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(60));
        let started = std::time::Instant::now();
        assert!(!b.wait_or(&cancel).await);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
