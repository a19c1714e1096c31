//! What a container uses, as the engine counts it: one sample of its counters (CPU time,
//! memory against its limit, network and block I/O), how often it was restarted, and the
//! OOM kills of a span of time. Each is one bounded call with a probe's deadline: a
//! sampler that asks every few seconds must never wait on an engine for longer.
//!
//! The stats call is one-shot (`stream=false`, `one-shot=true`): the engine answers at
//! once with its counters instead of waiting a second for a second reading, and Pier
//! derives rates from its own successive samples.

use std::collections::HashMap;

use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::{EventsOptionsBuilder, StatsOptionsBuilder};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;

use super::deadline::Call;
use super::{Engine, LABEL_MANAGED, Result, not_found_is_none};

/// OOM kills read from one span of an engine's events, at most.
const MAX_OOM_KILLS: usize = 1024;

/// A container's counters at one moment. Every counter only grows while the container
/// lives, except `memory_bytes` (a level); a restart keeps them (the cgroup stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    /// CPU time used since the container started, in nanoseconds.
    pub cpu_ns: u64,
    /// Memory in use, the page cache that can be dropped at once left out (what
    /// `docker stats` shows): `usage` less `inactive_file` (cgroup v2) or
    /// `total_inactive_file` (v1).
    pub memory_bytes: u64,
    /// The memory the container may use: its limit, or the host's memory without one.
    pub memory_limit_bytes: Option<u64>,
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
    pub block_read_bytes: u64,
    pub block_write_bytes: u64,
}

impl Usage {
    /// The engine's answer reduced to the counters; a field the engine left out is 0.
    pub(crate) fn of(s: &ContainerStatsResponse) -> Self {
        let memory = s.memory_stats.as_ref();
        let usage = memory.and_then(|m| m.usage).unwrap_or(0);
        let inactive = memory
            .and_then(|m| m.stats.as_ref())
            .and_then(|st| {
                st.get("inactive_file")
                    .or_else(|| st.get("total_inactive_file"))
            })
            .copied()
            .unwrap_or(0);
        let (rx, tx) = s
            .networks
            .iter()
            .flatten()
            .fold((0u64, 0u64), |(r, t), (_, n)| {
                (
                    r.saturating_add(n.rx_bytes.unwrap_or(0)),
                    t.saturating_add(n.tx_bytes.unwrap_or(0)),
                )
            });
        let (read, write) = block_io(s);
        Usage {
            cpu_ns: s
                .cpu_stats
                .as_ref()
                .and_then(|c| c.cpu_usage.as_ref())
                .and_then(|u| u.total_usage)
                .unwrap_or(0),
            memory_bytes: usage.saturating_sub(inactive),
            // A limit of 0 (an exited container's answer) is no limit.
            memory_limit_bytes: memory.and_then(|m| m.limit).filter(|l| *l > 0),
            net_rx_bytes: rx,
            net_tx_bytes: tx,
            block_read_bytes: read,
            block_write_bytes: write,
        }
    }
}

/// Bytes read and written, summed over devices; cgroup v1 names the ops `Read`/`Write`,
/// v2 `read`/`write`.
fn block_io(s: &ContainerStatsResponse) -> (u64, u64) {
    let entries = s
        .blkio_stats
        .as_ref()
        .and_then(|b| b.io_service_bytes_recursive.as_ref());
    entries
        .into_iter()
        .flatten()
        .fold((0u64, 0u64), |(r, w), e| {
            let v = e.value.unwrap_or(0);
            match e.op.as_deref().map(str::to_ascii_lowercase).as_deref() {
                Some("read") => (r.saturating_add(v), w),
                Some("write") => (r, w.saturating_add(v)),
                _ => (r, w),
            }
        })
}

/// What the engine says of a container's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Runs {
    /// Times the engine restarted it (its restart policy), a restart under way counted.
    pub restarts: i64,
    /// Its last run ended because the kernel killed it for memory (reset when it starts
    /// again: OOM kills of a restarting container are read from the engine's events).
    pub oom_killed: bool,
}

/// An OOM kill the engine reported for one of Pier's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OomKill {
    pub container_id: String,
    pub at: DateTime<Utc>,
    /// The container's labels, as the engine's event carries them (`pier.app`, ...).
    pub labels: HashMap<String, String>,
}

/// The engine's idea of a time: seconds and nanoseconds since the epoch.
fn engine_time(t: DateTime<Utc>) -> String {
    format!("{}.{:09}", t.timestamp(), t.timestamp_subsec_nanos())
}

impl Engine {
    /// One sample of container `id`'s counters; `None` when there is no such container.
    pub(crate) async fn usage(&self, id: &str) -> Result<Option<Usage>> {
        let options = StatsOptionsBuilder::default()
            .stream(false)
            .one_shot(true)
            .build();
        let action = format!("stats of container {id}");
        let answer = self
            .call(Call::Probe, &action, async |d| {
                let mut stream = d.stats(id, Some(options));
                match stream.next().await {
                    Some(answer) => not_found_is_none(answer),
                    None => Ok(None),
                }
            })
            .await?;
        Ok(answer.as_ref().map(Usage::of))
    }

    /// How often container `id` was restarted and whether the kernel killed its last run
    /// for memory; `None` when there is no such container.
    pub(crate) async fn runs(&self, id: &str) -> Result<Option<Runs>> {
        let action = format!("inspect container {id}");
        let found = self
            .call(Call::Probe, &action, async |d| {
                not_found_is_none(d.inspect_container(id, None).await)
            })
            .await?;
        Ok(found.map(|c| {
            let state = c.state.unwrap_or_default();
            Runs {
                restarts: c.restart_count.unwrap_or(0)
                    + i64::from(state.restarting.unwrap_or(false)),
                oom_killed: state.oom_killed.unwrap_or(false),
            }
        }))
    }

    /// The OOM kills of Pier's containers from `since` until `until`: one call that the
    /// engine answers from its own recent events and then closes (`until` is not in the
    /// future, so it never waits for more).
    pub(crate) async fn oom_kills(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<OomKill>> {
        let filters = HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("event".to_owned(), vec!["oom".to_owned()]),
            ("label".to_owned(), vec![format!("{LABEL_MANAGED}=true")]),
        ]);
        let options = EventsOptionsBuilder::default()
            .since(&engine_time(since))
            .until(&engine_time(until))
            .filters(&filters)
            .build();
        self.call(Call::Probe, "read OOM events", async |d| {
            let mut events = d.events(Some(options));
            let mut out = Vec::new();
            // The engine keeps a few hundred events; more than the cap is not read.
            while out.len() < MAX_OOM_KILLS
                && let Some(event) = events.next().await
            {
                let event = event?;
                let Some(actor) = event.actor else { continue };
                let at = event
                    .time_nano
                    .map(DateTime::from_timestamp_nanos)
                    .unwrap_or(until);
                out.push(OomKill {
                    container_id: actor.id.unwrap_or_default(),
                    at,
                    labels: actor.attributes.unwrap_or_default(),
                });
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{
        ContainerBlkioStatEntry, ContainerBlkioStats, ContainerCpuStats, ContainerCpuUsage,
        ContainerMemoryStats, ContainerNetworkStats,
    };

    fn answer(stats: HashMap<String, u64>) -> ContainerStatsResponse {
        ContainerStatsResponse {
            cpu_stats: Some(ContainerCpuStats {
                cpu_usage: Some(ContainerCpuUsage {
                    total_usage: Some(2_500_000_000),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(40 << 20),
                limit: Some(64 << 20),
                stats: Some(stats),
                ..Default::default()
            }),
            networks: Some(HashMap::from([
                (
                    "eth0".to_owned(),
                    ContainerNetworkStats {
                        rx_bytes: Some(100),
                        tx_bytes: Some(10),
                        ..Default::default()
                    },
                ),
                (
                    "eth1".to_owned(),
                    ContainerNetworkStats {
                        rx_bytes: Some(5),
                        tx_bytes: Some(1),
                        ..Default::default()
                    },
                ),
            ])),
            blkio_stats: Some(ContainerBlkioStats {
                io_service_bytes_recursive: Some(vec![
                    entry("Read", 4096),
                    entry("write", 8192),
                    entry("Total", 12288),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn entry(op: &str, value: u64) -> ContainerBlkioStatEntry {
        ContainerBlkioStatEntry {
            op: Some(op.to_owned()),
            value: Some(value),
            ..Default::default()
        }
    }

    #[test]
    fn memory_leaves_out_the_inactive_page_cache_of_either_cgroup_version() {
        let v2 = Usage::of(&answer(HashMap::from([("inactive_file".into(), 8 << 20)])));
        assert_eq!(v2.memory_bytes, 32 << 20);
        let v1 = Usage::of(&answer(HashMap::from([(
            "total_inactive_file".into(),
            4 << 20,
        )])));
        assert_eq!(v1.memory_bytes, 36 << 20);
        assert_eq!(v1.memory_limit_bytes, Some(64 << 20));
    }

    #[test]
    fn counters_are_summed_over_networks_and_devices() {
        let u = Usage::of(&answer(HashMap::new()));
        assert_eq!(u.cpu_ns, 2_500_000_000);
        assert_eq!((u.net_rx_bytes, u.net_tx_bytes), (105, 11));
        assert_eq!((u.block_read_bytes, u.block_write_bytes), (4096, 8192));
    }

    #[test]
    fn an_empty_answer_is_all_zero_and_no_limit() {
        let u = Usage::of(&ContainerStatsResponse::default());
        assert_eq!(u, Usage::default());
    }

    #[test]
    fn the_engine_reads_times_as_seconds_with_nanoseconds() {
        let t = DateTime::from_timestamp(1_700_000_000, 5).unwrap();
        assert_eq!(engine_time(t), "1700000000.000000005");
    }
}
