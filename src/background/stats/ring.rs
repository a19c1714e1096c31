//! One container's last hour of samples, and the rates the pages draw from them.
//!
//! A ring holds at most [`Ring::capacity`] samples (an hour at the sampling interval, and
//! never more than [`MAX_SAMPLES`]) and drops what is older than [`HISTORY`]: however long
//! Pier runs, a container costs a fixed few kilobytes.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::engine::Usage;

/// How far back the pages and the API look.
pub(crate) const HISTORY: Duration = Duration::from_secs(3600);
/// Samples kept per container at most, whatever the interval.
pub(crate) const MAX_SAMPLES: usize = 3600;

/// One reading of a container.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub at: DateTime<Utc>,
    pub usage: Usage,
    pub restarts: i64,
}

/// The samples of one container, oldest first, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct Ring {
    samples: VecDeque<Sample>,
    capacity: usize,
}

/// A point of a container's history: what it used between the sample before and this one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Point {
    pub at: DateTime<Utc>,
    /// CPU cores in use on average (1.0: one core busy all the time).
    pub cpu_cores: f64,
    pub memory_bytes: u64,
    /// Bytes received and sent per second, together.
    pub network_bytes_per_second: f64,
    /// Bytes read and written per second, together.
    pub block_bytes_per_second: f64,
}

impl Ring {
    /// A ring for an hour of samples `interval` apart.
    pub(crate) fn for_interval(interval: Duration) -> Self {
        let per_hour = HISTORY.as_secs_f64() / interval.as_secs_f64().max(0.001);
        let capacity = (per_hour.ceil() as usize).clamp(2, MAX_SAMPLES);
        Self {
            samples: VecDeque::with_capacity(capacity.min(64)),
            capacity,
        }
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds `s` and forgets what is older than [`HISTORY`] before it, or beyond capacity.
    pub(crate) fn push(&mut self, s: Sample) {
        let horizon = s.at - chrono::Duration::from_std(HISTORY).unwrap_or_default();
        while self.samples.front().is_some_and(|o| o.at < horizon) {
            self.samples.pop_front();
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    pub(crate) fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    /// The CPU in use between the last two samples, when there are two.
    pub(crate) fn cpu_now(&self) -> Option<f64> {
        let n = self.samples.len();
        (n >= 2).then(|| point(&self.samples[n - 2], &self.samples[n - 1]).cpu_cores)
    }

    /// A point per pair of successive samples within the last hour before `now`. A counter
    /// that went down (the container was recreated under the same id, which the engine
    /// does not do, or a wrapped counter) gives a rate of 0, never a negative one.
    pub(crate) fn points(&self, now: DateTime<Utc>) -> Vec<Point> {
        let horizon = now - chrono::Duration::from_std(HISTORY).unwrap_or_default();
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .filter(|(_, b)| b.at >= horizon)
            .map(|(a, b)| point(a, b))
            .collect()
    }
}

fn point(a: &Sample, b: &Sample) -> Point {
    let secs = ((b.at - a.at).num_milliseconds() as f64 / 1000.0).max(0.001);
    let rate = |from: u64, to: u64| to.saturating_sub(from) as f64 / secs;
    let (ua, ub) = (&a.usage, &b.usage);
    Point {
        at: b.at,
        cpu_cores: rate(ua.cpu_ns, ub.cpu_ns) / 1e9,
        memory_bytes: ub.memory_bytes,
        network_bytes_per_second: rate(
            ua.net_rx_bytes.saturating_add(ua.net_tx_bytes),
            ub.net_rx_bytes.saturating_add(ub.net_tx_bytes),
        ),
        block_bytes_per_second: rate(
            ua.block_read_bytes.saturating_add(ua.block_write_bytes),
            ub.block_read_bytes.saturating_add(ub.block_write_bytes),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    fn sample(secs: i64, cpu_ns: u64, memory: u64, net: u64) -> Sample {
        Sample {
            at: at(secs),
            usage: Usage {
                cpu_ns,
                memory_bytes: memory,
                net_rx_bytes: net,
                ..Usage::default()
            },
            restarts: 0,
        }
    }

    #[test]
    fn a_ring_holds_an_hour_at_its_interval_and_never_more_than_the_cap() {
        assert_eq!(Ring::for_interval(Duration::from_secs(10)).capacity(), 360);
        assert_eq!(
            Ring::for_interval(Duration::from_millis(100)).capacity(),
            MAX_SAMPLES
        );
        let mut r = Ring::for_interval(Duration::from_secs(10));
        for i in 0..1000 {
            r.push(sample(i * 10, 0, 0, 0));
        }
        assert_eq!(r.len(), 360);
    }

    #[test]
    fn samples_older_than_an_hour_are_forgotten() {
        let mut r = Ring::for_interval(Duration::from_secs(10));
        r.push(sample(0, 0, 0, 0));
        r.push(sample(10, 0, 0, 0));
        r.push(sample(3700, 0, 0, 0));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn rates_come_from_successive_samples_and_never_go_negative() {
        let mut r = Ring::for_interval(Duration::from_secs(10));
        r.push(sample(0, 0, 1 << 20, 0));
        r.push(sample(10, 5_000_000_000, 2 << 20, 1000));
        r.push(sample(20, 1_000_000_000, 3 << 20, 500));
        let p = r.points(at(20));
        assert_eq!(p.len(), 2);
        assert!((p[0].cpu_cores - 0.5).abs() < 1e-9);
        assert_eq!(p[0].memory_bytes, 2 << 20);
        assert!((p[0].network_bytes_per_second - 100.0).abs() < 1e-9);
        assert_eq!(p[1].cpu_cores, 0.0);
        assert_eq!(p[1].network_bytes_per_second, 0.0);
        assert_eq!(r.cpu_now(), Some(0.0));
    }
}
