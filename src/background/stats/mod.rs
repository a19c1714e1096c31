//! Resource use: what each of Pier's containers uses (CPU, memory against its limit,
//! network, block I/O, restarts, OOM kills), sampled from its engine and kept in memory
//! for an hour ([`ring`]), for the app page's sparklines, `GET /api/apps/{app}` and
//! `/metrics` ([`prometheus`]).
//!
//! Sampling costs nothing unless asked for. [`Stats`] is the demand: a page view, an API
//! read or a scrape calls [`Stats::want`], a deployment that succeeded
//! [`Stats::watch_for`]; the sampler ([`sampler`]) takes one sample of every running
//! container per `stats_interval` while the demand lasts, and otherwise waits on a
//! wake-up with no timer at all. An idle Pier asks its engines nothing.

mod prometheus;
mod ring;
pub(crate) mod sampler;
mod source;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

pub(crate) use ring::{HISTORY, Point, Ring, Sample};

/// A page view or a scrape keeps the sampler going for this many intervals: a Prometheus
/// that scrapes every minute at the default 10 s interval keeps it going for good.
pub(crate) const DEMAND_INTERVALS: u32 = 6;

/// Whose container a ring is: its engine and the labels Pier gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct Who {
    pub target: String,
    pub app: String,
    pub service: String,
    pub container_id: String,
    pub container_name: String,
    /// The deployment that created it (its `pier.deployment` label), if it has one.
    pub deployment: Option<String>,
}

struct Tracked {
    who: Who,
    ring: Ring,
    /// OOM kills the engine reported while Pier sampled.
    oom_kills: u64,
}

/// The demand for samples and what they found. Cheap to clone; one per process.
#[derive(Clone)]
pub struct Stats(Arc<Inner>);

struct Inner {
    interval: Duration,
    epoch: Instant,
    /// Sampling is wanted until this many milliseconds after `epoch`.
    wanted_until: AtomicU64,
    /// Wakes the sampler when demand comes back after it went idle.
    wake: Notify,
    /// By target and container id; only containers the last answer of their engine listed.
    tracked: Mutex<HashMap<(String, String), Tracked>>,
    /// Why the last round could not sample everything, in words, per target.
    problems: Mutex<HashMap<String, String>>,
}

impl Stats {
    /// The demand and the rings for samples `interval` apart; nothing samples until the
    /// sampler is started ([`sampler::spawn`]).
    pub fn new(interval: Duration) -> Self {
        Self(Arc::new(Inner {
            interval,
            epoch: Instant::now(),
            wanted_until: AtomicU64::new(0),
            wake: Notify::new(),
            tracked: Mutex::default(),
            problems: Mutex::default(),
        }))
    }

    pub(crate) fn interval(&self) -> Duration {
        self.0.interval
    }

    fn millis(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.0.epoch).as_millis() as u64
    }

    /// Someone looks (a page, the API, a scrape): sample for the next
    /// [`DEMAND_INTERVALS`] intervals, starting now if the sampler was idle.
    pub(crate) fn want(&self) {
        self.watch_for(self.0.interval * DEMAND_INTERVALS);
    }

    /// Sample for at least `span` from now (after a deployment: its OOM kills and restart
    /// loops are found even if nobody looks).
    pub(crate) fn watch_for(&self, span: Duration) {
        let until = self.millis(Instant::now() + span);
        let before = self.0.wanted_until.fetch_max(until, Ordering::AcqRel);
        if before <= self.millis(Instant::now()) {
            // A stored permit if the sampler is between its check and its wait.
            self.0.wake.notify_one();
        }
    }

    /// Whether samples are wanted at `now`.
    pub(crate) fn wanted(&self, now: Instant) -> bool {
        self.0.wanted_until.load(Ordering::Acquire) > self.millis(now)
    }

    /// Waits until someone wants samples again.
    pub(crate) async fn demanded(&self) {
        self.0.wake.notified().await
    }

    /// What one engine answered: the samples of its live containers, the ids of every
    /// container it listed, and the containers the kernel killed for memory since its
    /// last round. A container it no longer lists drops out with its ring; one it listed
    /// but could not be sampled this time keeps its ring as it was.
    pub(crate) fn record(
        &self,
        target: &str,
        seen: Vec<(Who, Sample)>,
        listed: &[String],
        ooms: &[String],
    ) {
        let mut tracked = self.0.tracked.lock().unwrap_or_else(|p| p.into_inner());
        let mut before: HashMap<(String, String), Tracked> =
            tracked.extract_if(|(t, _), _| t == target).collect();
        for (who, sample) in seen {
            let key = (target.to_owned(), who.container_id.clone());
            let mut t = before.remove(&key).unwrap_or_else(|| Tracked {
                who: who.clone(),
                ring: Ring::for_interval(self.0.interval),
                oom_kills: 0,
            });
            t.who = who;
            t.ring.push(sample);
            t.oom_kills += ooms.iter().filter(|id| **id == key.1).count() as u64;
            tracked.insert(key, t);
        }
        for id in listed {
            let key = (target.to_owned(), id.clone());
            if let Some(t) = before.remove(&key) {
                tracked.insert(key, t);
            }
        }
    }

    /// Why `target` could not be sampled, or `None` once it could again.
    pub(crate) fn set_problem(&self, target: &str, problem: Option<String>) {
        let mut problems = self.0.problems.lock().unwrap_or_else(|p| p.into_inner());
        match problem {
            Some(p) => problems.insert(target.to_owned(), p),
            None => problems.remove(target),
        };
    }

    /// The resource use of `app`'s containers, as of the last samples, and why any of
    /// its `targets` could not be sampled.
    pub(crate) fn app(&self, app: &str, targets: &[String]) -> Resources {
        let now = Utc::now();
        let tracked = self.0.tracked.lock().unwrap_or_else(|p| p.into_inner());
        let mut containers: Vec<ContainerUsage> = tracked
            .values()
            .filter(|t| t.who.app == app)
            .filter_map(|t| ContainerUsage::of(t, now))
            .collect();
        containers.sort_by(|a, b| {
            (&a.who.target, &a.who.service, &a.who.container_name).cmp(&(
                &b.who.target,
                &b.who.service,
                &b.who.container_name,
            ))
        });
        let problems = self.0.problems.lock().unwrap_or_else(|p| p.into_inner());
        let mut problem: Vec<String> = problems
            .iter()
            .filter(|(t, _)| targets.contains(t))
            .map(|(t, p)| format!("{t}: {p}"))
            .collect();
        problem.sort();
        Resources {
            sampling: self.wanted(Instant::now()),
            interval_seconds: self.0.interval.as_secs_f64(),
            problem: (!problem.is_empty()).then(|| problem.join("; ")),
            containers,
        }
    }
}

/// An app's resource use, as the page and `GET /api/apps/{app}` show it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Resources {
    /// Whether Pier samples now (someone looked recently, or a deployment just ended).
    pub sampling: bool,
    pub interval_seconds: f64,
    /// Why some engine could not be sampled in the last round.
    pub problem: Option<String>,
    pub containers: Vec<ContainerUsage>,
}

/// One container's latest counters and its last hour.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ContainerUsage {
    #[serde(flatten)]
    pub who: Who,
    pub sampled_at: DateTime<Utc>,
    pub cpu_seconds_total: f64,
    /// CPU cores in use between the last two samples.
    pub cpu_cores: Option<f64>,
    pub memory_bytes: u64,
    pub memory_limit_bytes: Option<u64>,
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
    pub block_read_bytes: u64,
    pub block_write_bytes: u64,
    pub restarts: i64,
    pub oom_kills: u64,
    /// A point per sample of the last hour, oldest first.
    pub history: Vec<Point>,
}

impl ContainerUsage {
    fn of(t: &Tracked, now: DateTime<Utc>) -> Option<Self> {
        let last = t.ring.latest()?;
        let u = &last.usage;
        Some(Self {
            who: t.who.clone(),
            sampled_at: last.at,
            cpu_seconds_total: u.cpu_ns as f64 / 1e9,
            cpu_cores: t.ring.cpu_now(),
            memory_bytes: u.memory_bytes,
            memory_limit_bytes: u.memory_limit_bytes,
            network_rx_bytes: u.net_rx_bytes,
            network_tx_bytes: u.net_tx_bytes,
            block_read_bytes: u.block_read_bytes,
            block_write_bytes: u.block_write_bytes,
            restarts: last.restarts,
            oom_kills: t.oom_kills,
            history: t.ring.points(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Usage;

    fn who(id: &str) -> Who {
        Who {
            target: "local".into(),
            app: "web".into(),
            service: "web".into(),
            container_id: id.into(),
            container_name: format!("web-{id}"),
            deployment: None,
        }
    }

    fn sample(memory: u64) -> Sample {
        Sample {
            at: Utc::now(),
            usage: Usage {
                memory_bytes: memory,
                ..Usage::default()
            },
            restarts: 0,
        }
    }

    #[test]
    fn a_container_its_engine_no_longer_lists_is_forgotten() {
        let s = Stats::new(Duration::from_secs(10));
        let (a, b) = (who("a"), who("b"));
        s.record(
            "local",
            vec![(a, sample(1)), (b.clone(), sample(2))],
            &[],
            &[],
        );
        s.record("local", vec![(b, sample(3))], &["b".into()], &["b".into()]);
        let r = s.app("web", &[]);
        assert_eq!(r.containers.len(), 1);
        assert_eq!(r.containers[0].memory_bytes, 3);
        assert_eq!(r.containers[0].oom_kills, 1);
        assert!(s.app("other", &[]).containers.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn demand_lasts_its_intervals_and_then_lapses() {
        let s = Stats::new(Duration::from_secs(10));
        assert!(!s.wanted(Instant::now()));
        s.want();
        assert!(s.wanted(Instant::now()));
        tokio::time::advance(Duration::from_secs(10) * DEMAND_INTERVALS).await;
        assert!(!s.wanted(Instant::now()));
    }
}
