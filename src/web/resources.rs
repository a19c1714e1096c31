//! An app's resource use on its page: a row per container with its numbers now and a
//! sparkline of the last hour for each, drawn here as a small SVG (no script, no image
//! request). Each sparkline is an image with its own words (`role="img"`, `aria-label`
//! and `<title>`: what it shows, now and at its peak), so a screen reader says what the
//! line shows.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use crate::background::stats::{ContainerUsage, Point};

const WIDTH: f64 = 120.0;
const HEIGHT: f64 = 24.0;

/// One container's row on the page; every field is text ready to show, the SVGs built
/// from numbers only (nothing in them comes from the app or the engine's words).
pub(crate) struct ResourceRow {
    pub target: String,
    pub service: String,
    pub container: String,
    pub cpu: String,
    pub cpu_svg: String,
    pub memory: String,
    pub memory_svg: String,
    pub network: String,
    pub network_svg: String,
    pub block: String,
    pub block_svg: String,
    pub restarts: i64,
    pub oom_kills: u64,
}

/// `n` bytes in binary units: `512 B`, `30.0 MiB`.
pub(crate) fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n.max(0.0);
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn cores(c: f64) -> String {
    format!("{c:.2} cores")
}

fn rate(b: f64) -> String {
    format!("{}/s", bytes(b))
}

impl ResourceRow {
    pub(crate) fn of(c: &ContainerUsage, interval: f64, now: DateTime<Utc>) -> Self {
        let h = &c.history;
        let line = |what: &str, value: fn(&Point) -> f64, words: fn(f64) -> String, top| {
            Sparkline {
                what,
                points: h.iter().map(|p| (p.at, value(p))).collect(),
                top,
                interval,
                words,
            }
            .svg(now)
        };
        let limit = c.memory_limit_bytes.map(|l| l as f64);
        let memory = match limit {
            Some(l) => format!("{} of {}", bytes(c.memory_bytes as f64), bytes(l)),
            None => bytes(c.memory_bytes as f64),
        };
        let last = h.last();
        Self {
            target: c.who.target.clone(),
            service: c.who.service.clone(),
            container: c.who.container_name.clone(),
            cpu: c.cpu_cores.map_or_else(|| "—".into(), cores),
            cpu_svg: line("CPU", |p| p.cpu_cores, cores, None),
            memory,
            memory_svg: line("Memory", |p| p.memory_bytes as f64, bytes, limit),
            network: last.map_or_else(|| "—".into(), |p| rate(p.network_bytes_per_second)),
            network_svg: line("Network", |p| p.network_bytes_per_second, rate, None),
            block: last.map_or_else(|| "—".into(), |p| rate(p.block_bytes_per_second)),
            block_svg: line("Block I/O", |p| p.block_bytes_per_second, rate, None),
            restarts: c.restarts,
            oom_kills: c.oom_kills,
        }
    }
}

/// A series over the last hour, drawn to fit [`WIDTH`] × [`HEIGHT`].
struct Sparkline<'a> {
    what: &'a str,
    points: Vec<(DateTime<Utc>, f64)>,
    /// The top of the scale when it is fixed (a memory limit not far above the values);
    /// otherwise the peak.
    top: Option<f64>,
    /// Seconds between samples: a gap of several (nobody looked) breaks the line.
    interval: f64,
    words: fn(f64) -> String,
}

impl Sparkline<'_> {
    fn svg(&self, now: DateTime<Utc>) -> String {
        let peak = self.points.iter().map(|(_, v)| *v).fold(0.0, f64::max);
        let latest = self.points.last().map_or(0.0, |(_, v)| *v);
        // A limit far above the values would flatten the line; then the peak is the top.
        let top = match self.top {
            Some(t) if t > 0.0 && t <= peak * 4.0 => t,
            _ => peak,
        }
        .max(f64::MIN_POSITIVE);
        let label = if self.points.is_empty() {
            format!("{} over the last hour: no samples yet", self.what)
        } else {
            format!(
                "{} over the last hour: now {}, peak {}",
                self.what,
                (self.words)(latest),
                (self.words)(peak)
            )
        };
        let mut svg = format!(
            "<svg class=\"spark\" role=\"img\" aria-label=\"{label}\" width=\"{WIDTH}\" \
             height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\"><title>{label}</title>"
        );
        let d = self.path(now, top);
        if !d.is_empty() {
            let _ = write!(
                svg,
                "<path d=\"{d}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\"/>"
            );
        }
        svg.push_str("</svg>");
        svg
    }

    /// `M x y L x y …`, a new `M` after each gap of more than three intervals
    /// (nobody looked, so nothing was sampled; a late round or two is no gap).
    /// The time axis ends now and spans the hour, or less while the samples cover less,
    /// so that the first minutes of samples are a line and not a dot at the right edge.
    fn path(&self, now: DateTime<Utc>, top: f64) -> String {
        let secs = |from: DateTime<Utc>| (now - from).num_milliseconds() as f64 / 1000.0;
        let hour = crate::background::stats::HISTORY.as_secs_f64();
        let covered = self.points.first().map_or(hour, |(at, _)| secs(*at));
        let span = covered.clamp(self.interval * 2.0, hour).max(0.001);
        let mut d = String::new();
        let mut previous: Option<DateTime<Utc>> = None;
        for (at, v) in &self.points {
            let x = (WIDTH * (1.0 - secs(*at) / span)).clamp(0.0, WIDTH);
            let y = HEIGHT - 1.0 - (v / top).clamp(0.0, 1.0) * (HEIGHT - 2.0);
            let gap = previous
                .is_none_or(|p| (*at - p).num_milliseconds() as f64 / 1000.0 > self.interval * 3.0);
            let _ = write!(d, "{}{x:.1} {y:.1} ", if gap { "M" } else { "L" });
            previous = Some(*at);
        }
        d.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs_ago: i64, now: DateTime<Utc>) -> DateTime<Utc> {
        now - chrono::Duration::seconds(secs_ago)
    }

    #[test]
    fn bytes_are_written_in_binary_units() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(30.0 * 1048576.0), "30.0 MiB");
        assert_eq!(bytes(1.5 * 1073741824.0), "1.5 GiB");
    }

    #[test]
    fn a_sparkline_says_what_it_shows_and_breaks_at_gaps() {
        let now = Utc::now();
        let s = Sparkline {
            what: "Memory",
            points: vec![
                (at(3600, now), 0.0),
                (at(3590, now), 32.0 * 1048576.0),
                (at(600, now), 16.0 * 1048576.0),
                (at(590, now), 8.0 * 1048576.0),
            ],
            top: Some(64.0 * 1048576.0),
            interval: 10.0,
            words: bytes,
        };
        let svg = s.svg(now);
        assert!(
            svg.starts_with("<svg class=\"spark\" role=\"img\""),
            "{svg}"
        );
        assert!(
            svg.contains("aria-label=\"Memory over the last hour: now 8.0 MiB, peak 32.0 MiB\"")
        );
        assert!(svg.contains("<title>Memory over the last hour"));
        // Two runs of samples: two moves, each followed by one line.
        let d = svg.split("d=\"").nth(1).unwrap();
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(d.matches('L').count(), 2, "{d}");
        // At the limit's scale, 32 MiB of 64 is half way up.
        assert!(d.contains("M0.0 23.0 L0.3 12.0"), "{d}");
    }

    #[test]
    fn a_few_minutes_of_samples_span_the_whole_width() {
        let now = Utc::now();
        let s = Sparkline {
            what: "CPU",
            points: vec![(at(120, now), 0.5), (at(60, now), 1.0), (at(0, now), 0.0)],
            top: None,
            interval: 60.0,
            words: cores,
        };
        let svg = s.svg(now);
        assert!(
            svg.contains("d=\"M0.0 12.0 L60.0 1.0 L120.0 23.0\""),
            "{svg}"
        );
    }

    #[test]
    fn no_samples_is_said_and_draws_nothing() {
        let s = Sparkline {
            what: "CPU",
            points: vec![],
            top: None,
            interval: 10.0,
            words: cores,
        };
        let svg = s.svg(Utc::now());
        assert!(svg.contains("no samples yet"));
        assert!(!svg.contains("<path"));
    }
}
