//! The samples as Prometheus series, appended to `/metrics`: one per container and
//! counter, labelled with its app, service, target and container name. Written here rather
//! than through the process's recorder, so that a container that is gone, or a sample too
//! old to be true, is simply not in the next scrape (the recorder keeps every series it
//! ever saw), and CPU seconds stay fractional.

use std::fmt::Write;

use chrono::Utc;

use super::{ContainerUsage, DEMAND_INTERVALS, Stats};

/// Each series: name, type, help, and its value of a container.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ContainerUsage) -> f64,
);

const SERIES: &[Series] = &[
    (
        "pier_container_cpu_seconds_total",
        "counter",
        "CPU time the container used, in seconds.",
        |c| c.cpu_seconds_total,
    ),
    (
        "pier_container_memory_bytes",
        "gauge",
        "Memory the container uses, page cache that can be dropped left out.",
        |c| c.memory_bytes as f64,
    ),
    (
        "pier_container_memory_limit_bytes",
        "gauge",
        "Memory the container may use (its limit, or the host's memory).",
        |c| c.memory_limit_bytes.unwrap_or(0) as f64,
    ),
    (
        "pier_container_network_receive_bytes_total",
        "counter",
        "Bytes the container received.",
        |c| c.network_rx_bytes as f64,
    ),
    (
        "pier_container_network_transmit_bytes_total",
        "counter",
        "Bytes the container sent.",
        |c| c.network_tx_bytes as f64,
    ),
    (
        "pier_container_block_read_bytes_total",
        "counter",
        "Bytes the container read from block devices.",
        |c| c.block_read_bytes as f64,
    ),
    (
        "pier_container_block_write_bytes_total",
        "counter",
        "Bytes the container wrote to block devices.",
        |c| c.block_write_bytes as f64,
    ),
    (
        "pier_container_restarts",
        "gauge",
        "Times the engine restarted the container.",
        |c| c.restarts as f64,
    ),
];

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
fn escaped(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Stats {
    /// Every fresh sample as Prometheus text. A sample older than the demand window is
    /// left out: the sampler had stopped, and its numbers are no longer the container's.
    pub(crate) fn prometheus(&self) -> String {
        let fresh = Utc::now()
            - chrono::Duration::from_std(self.interval() * (DEMAND_INTERVALS + 1))
                .unwrap_or_default();
        let containers: Vec<ContainerUsage> = {
            let tracked = self.0.tracked.lock().unwrap_or_else(|p| p.into_inner());
            tracked
                .values()
                .filter(|t| t.ring.latest().is_some_and(|l| l.at >= fresh))
                .filter_map(latest_only)
                .collect()
        };
        render(&containers)
    }
}

/// A container's latest counters, without the history the pages draw.
fn latest_only(t: &super::Tracked) -> Option<ContainerUsage> {
    let mut c = ContainerUsage::of(t, Utc::now())?;
    c.history.clear();
    Some(c)
}

fn render(containers: &[ContainerUsage]) -> String {
    let mut out = String::new();
    if containers.is_empty() {
        return out;
    }
    for (name, kind, help, value) in SERIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for c in containers {
            let w = &c.who;
            let _ = writeln!(
                out,
                "{name}{{app=\"{}\",service=\"{}\",target=\"{}\",container=\"{}\"}} {}",
                escaped(&w.app),
                escaped(&w.service),
                escaped(&w.target),
                escaped(&w.container_name),
                value(c)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::background::stats::Who;

    #[test]
    fn each_container_is_a_series_with_its_app_service_and_target() {
        let c = ContainerUsage {
            who: Who {
                target: "local".into(),
                app: "web".into(),
                service: "api\"x".into(),
                container_id: "abc".into(),
                container_name: "web-1".into(),
                deployment: None,
            },
            sampled_at: Utc::now(),
            cpu_seconds_total: 1.5,
            cpu_cores: None,
            memory_bytes: 31_457_280,
            memory_limit_bytes: Some(67_108_864),
            network_rx_bytes: 0,
            network_tx_bytes: 0,
            block_read_bytes: 0,
            block_write_bytes: 0,
            restarts: 2,
            oom_kills: 0,
            history: vec![],
        };
        let text = render(&[c]);
        assert!(text.contains("# TYPE pier_container_cpu_seconds_total counter\n"));
        assert!(text.contains(
            "pier_container_cpu_seconds_total{app=\"web\",service=\"api\\\"x\",target=\"local\",container=\"web-1\"} 1.5\n"
        ), "{text}");
        assert!(text.contains("pier_container_memory_bytes{app=\"web\","));
        assert!(text.contains("} 31457280\n"));
        assert_eq!(render(&[]), "");
    }
}
