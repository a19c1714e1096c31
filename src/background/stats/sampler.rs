//! The sampler: one task that takes a round of samples per `stats_interval` while
//! [`Stats`] says they are wanted, and otherwise waits for a wake-up, with no timer: an
//! idle Pier asks its engines nothing (`an_idle_sampler_asks_the_engines_nothing`).
//!
//! After each round it looks for what a deployment should say: a container of a
//! deployment killed for memory (the engine's `oom` event, or the state of a container
//! between restarts) or restarted [`RESTART_LOOP`] times or more. Each becomes a row of
//! that deployment's timeline and a notification (`store/container_events.rs`), once:
//! the database refuses a second row for the same container and kind.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::source::{EngineSource, Listed, Source, Span, TargetRound, who};
use super::{DEMAND_INTERVALS, Stats, Who};
use crate::config::LiveConfig;
use crate::engine::EngineError;
use crate::error::error_chain;
use crate::store::{ContainerEventKind, NewContainerEvent, Store};
use crate::target::Targets;

/// Restarts by the engine from which a container is in a restart loop.
pub(crate) const RESTART_LOOP: i64 = 3;
/// How long after a deployment succeeded its containers are watched for OOM kills and
/// restart loops, whether or not anyone looks.
pub(crate) const WATCH_AFTER_DEPLOY: Duration = Duration::from_secs(10 * 60);
/// Remembered (container, kind) pairs already recorded, at most; beyond, the memory is
/// cleared and the database's uniqueness keeps the events single.
const REMEMBERED: usize = 10_000;

/// Starts the sampler over `targets`' containers of the apps `live` names, recording
/// events in `store`.
pub(crate) fn spawn(
    tasks: &mut JoinSet<()>,
    stats: Stats,
    (targets, store, live): (Targets, Store, LiveConfig),
    shutdown: CancellationToken,
) {
    let source = EngineSource {
        targets,
        store,
        live,
    };
    tasks.spawn(run(stats, source, shutdown));
}

/// What the sampler keeps between rounds.
#[derive(Default)]
struct Memory {
    /// Each engine's last round that read its events: the next one reads from there.
    events_until: HashMap<String, DateTime<Utc>>,
    /// Events already recorded.
    recorded: HashSet<(String, ContainerEventKind)>,
    /// Engines whose last round failed, so that a failure is logged when it starts and
    /// when it ends, not at every round.
    failing: HashSet<String>,
}

pub(crate) async fn run<S: Source>(stats: Stats, source: S, shutdown: CancellationToken) {
    let mut memory = Memory::default();
    loop {
        if !stats.wanted(tokio::time::Instant::now()) {
            tokio::select! {
                () = stats.demanded() => continue,
                () = shutdown.cancelled() => return,
            }
        }
        // Rounds start an interval apart, however long one takes (a slow engine makes
        // the next one late, never two at once).
        let next = tokio::time::Instant::now() + stats.interval();
        let span = memory.span(&stats, Utc::now());
        let rounds = tokio::select! {
            r = source.round(&span) => r,
            () = shutdown.cancelled() => return,
        };
        let events = memory.absorb(&stats, rounds, span.until);
        for e in events {
            if source.record(&e).await {
                memory.remember(&e);
            }
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

impl Memory {
    /// This round's span of events: from each engine's last round (at most an hour back;
    /// the engine keeps only its recent events anyway) until a second ago, so that a
    /// remote engine whose clock is a little behind is not asked about its future.
    fn span(&self, stats: &Stats, now: DateTime<Utc>) -> Span {
        let until = now - chrono::Duration::seconds(1);
        let back = |d: Duration| until - chrono::Duration::from_std(d).unwrap_or_default();
        let horizon = back(super::ring::HISTORY);
        Span {
            since: self
                .events_until
                .iter()
                .map(|(t, at)| (t.clone(), (*at).max(horizon)))
                .collect(),
            fallback: back(stats.interval() * DEMAND_INTERVALS),
            until,
        }
    }

    /// Records each engine's answer in `stats` and returns the events it shows.
    fn absorb(
        &mut self,
        stats: &Stats,
        rounds: Vec<TargetRound>,
        until: DateTime<Utc>,
    ) -> Vec<NewContainerEvent> {
        let mut events = Vec::new();
        for r in rounds {
            match r.listed {
                Ok(listed) => {
                    self.health(stats, &r.target, &listed.errors);
                    if listed.ooms.is_some() {
                        self.events_until.insert(r.target.clone(), until);
                    }
                    events.extend(self.events_of(&r.target, &listed));
                    let ooms: Vec<String> = listed
                        .ooms
                        .iter()
                        .flatten()
                        .map(|o| o.container_id.clone())
                        .collect();
                    let seen = listed.seen.into_iter().map(|(w, s, _)| (w, s)).collect();
                    stats.record(&r.target, seen, &listed.ids, &ooms);
                }
                Err(e) => self.health(stats, &r.target, std::slice::from_ref(&e)),
            }
        }
        events.retain(|e| !self.recorded.contains(&(e.container_id.clone(), e.kind)));
        events
    }

    fn remember(&mut self, e: &NewContainerEvent) {
        if self.recorded.len() >= REMEMBERED {
            self.recorded.clear();
        }
        self.recorded.insert((e.container_id.clone(), e.kind));
    }

    /// Counts each failed call by kind, and logs an engine's failures when they start and
    /// when they end.
    fn health(&mut self, stats: &Stats, target: &str, errors: &[EngineError]) {
        for e in errors {
            let kind = match e {
                EngineError::TimedOut { .. } => "timed_out",
                EngineError::Unavailable { .. } => "unavailable",
                EngineError::Refused { .. } | EngineError::OutOfSequence { .. } => "refused",
            };
            metrics::counter!("pier_stats_errors_total", "target" => target.to_owned(), "kind" => kind)
                .increment(1);
        }
        match errors.first() {
            Some(e) => {
                let words = error_chain(e);
                if self.failing.insert(target.to_owned()) {
                    tracing::warn!(target, error = %words, failed = errors.len(),
                        "cannot sample every container's resource use; counted in pier_stats_errors_total until it can");
                }
                stats.set_problem(target, Some(words));
            }
            None => {
                if self.failing.remove(target) {
                    tracing::info!(target, "resource use sampled again");
                }
                stats.set_problem(target, None);
            }
        }
    }

    /// The OOM kills and restart loops among what `target` answered, of containers that
    /// a deployment created.
    fn events_of(&self, target: &str, listed: &Listed) -> Vec<NewContainerEvent> {
        let mut out = Vec::new();
        for o in listed.ooms.iter().flatten() {
            let name = o.labels.get("name").map_or("", String::as_str);
            let w = who(target, &o.container_id, name, &o.labels);
            // Its sample of this round, if it still runs, says its limit and restarts.
            let sample = listed
                .seen
                .iter()
                .find(|(s, _, _)| s.container_id == o.container_id)
                .map(|(_, s, _)| s);
            out.extend(event(&w, ContainerEventKind::OomKilled, o.at, sample));
        }
        for (w, s, runs) in &listed.seen {
            if runs.oom_killed {
                out.extend(event(w, ContainerEventKind::OomKilled, s.at, Some(s)));
            }
            if runs.restarts >= RESTART_LOOP {
                out.extend(event(w, ContainerEventKind::RestartLoop, s.at, Some(s)));
            }
        }
        out
    }
}

/// The event of `kind` for `w`'s deployment; none for a container no deployment made.
fn event(
    w: &Who,
    kind: ContainerEventKind,
    at: DateTime<Utc>,
    sample: Option<&super::Sample>,
) -> Option<NewContainerEvent> {
    let deployment_id = Uuid::parse_str(w.deployment.as_deref()?).ok()?;
    Some(NewContainerEvent {
        deployment_id,
        kind,
        target: w.target.clone(),
        service: w.service.clone(),
        container_id: w.container_id.clone(),
        container_name: w.container_name.clone(),
        at,
        restarts: sample.map(|s| s.restarts),
        memory_limit_bytes: sample
            .and_then(|s| s.usage.memory_limit_bytes)
            .and_then(|l| i64::try_from(l).ok()),
    })
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
