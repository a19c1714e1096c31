//! Per-endpoint rate limits, one token bucket per endpoint in each sender: up to
//! `rate_limit.count` sends at once, refilled evenly over `rate_limit.per`. A receiver's
//! 429 pauses its endpoint for as long as it asked (every notification to that endpoint
//! waits, not only the one that was refused). In memory: several Pier processes each keep
//! their own budget, and a restart starts with a full one.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RateLimit;

struct Bucket {
    limit: RateLimit,
    tokens: f64,
    at: Instant,
    paused_until: Option<Instant>,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let per_token = self.limit.per.as_secs_f64() / f64::from(self.limit.count);
        let gained = now.saturating_duration_since(self.at).as_secs_f64() / per_token;
        self.tokens = (self.tokens + gained).min(f64::from(self.limit.count));
        self.at = now;
    }
}

#[derive(Default)]
pub(crate) struct Limits {
    buckets: HashMap<String, Bucket>,
}

impl Limits {
    pub(crate) fn new<'a>(endpoints: impl Iterator<Item = (&'a str, RateLimit)>) -> Limits {
        let now = Instant::now();
        let buckets = endpoints
            .map(|(name, limit)| {
                let b = Bucket {
                    limit,
                    tokens: f64::from(limit.count),
                    at: now,
                    paused_until: None,
                };
                (name.to_owned(), b)
            })
            .collect();
        Limits { buckets }
    }

    /// How many sends `endpoint` may make now.
    pub(crate) fn available(&mut self, endpoint: &str, now: Instant) -> u32 {
        let Some(b) = self.buckets.get_mut(endpoint) else {
            return 0;
        };
        if b.paused_until.is_some_and(|p| now < p) {
            return 0;
        }
        b.refill(now);
        b.tokens.floor() as u32
    }

    /// One send to `endpoint`.
    pub(crate) fn take(&mut self, endpoint: &str, now: Instant) {
        if let Some(b) = self.buckets.get_mut(endpoint) {
            b.refill(now);
            b.tokens = (b.tokens - 1.0).max(0.0);
        }
    }

    /// `endpoint` asked to be left alone for `wait`.
    pub(crate) fn pause(&mut self, endpoint: &str, now: Instant, wait: Duration) {
        if let Some(b) = self.buckets.get_mut(endpoint) {
            b.paused_until = Some(now + wait);
        }
    }

    /// How long until `endpoint` may send again.
    pub(crate) fn ready_in(&mut self, endpoint: &str, now: Instant) -> Duration {
        let Some(b) = self.buckets.get_mut(endpoint) else {
            return Duration::from_secs(3600);
        };
        if let Some(p) = b.paused_until.filter(|p| now < *p) {
            return p - now;
        }
        b.refill(now);
        let per_token = b.limit.per.as_secs_f64() / f64::from(b.limit.count);
        Duration::from_secs_f64(((1.0 - b.tokens) * per_token).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_one_per_interval_and_a_pause_holds_it() {
        let limit = RateLimit {
            count: 2,
            per: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let mut l = Limits::new([("chat", limit)].into_iter());
        assert_eq!(l.available("chat", t0), 2);
        l.take("chat", t0);
        l.take("chat", t0);
        assert_eq!(l.available("chat", t0), 0);
        assert_eq!(l.ready_in("chat", t0), Duration::from_secs(5));
        assert_eq!(l.available("chat", t0 + Duration::from_secs(5)), 1);
        l.pause("chat", t0 + Duration::from_secs(5), Duration::from_secs(30));
        assert_eq!(l.available("chat", t0 + Duration::from_secs(20)), 0);
        assert_eq!(
            l.ready_in("chat", t0 + Duration::from_secs(20)),
            Duration::from_secs(15)
        );
        assert_eq!(l.available("chat", t0 + Duration::from_secs(40)), 2);
        assert_eq!(l.available("unknown", t0), 0);
    }
}
