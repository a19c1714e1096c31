//! Medians, p90 and Pier's time by journal step, for `push_to_healthy`.

use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Default)]
pub struct Series(Vec<Duration>);

impl Series {
    pub fn add(&mut self, d: Duration) {
        self.0.push(d);
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    fn quantile(&self, q: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    }
    pub fn median(&self) -> Duration {
        // The lower median for an even count: with 10 rounds, the 5th of 10.
        self.quantile(0.5)
    }
    pub fn p90(&self) -> Duration {
        self.quantile(0.9)
    }
}

/// Pier's time by segment, over rounds: `notify→queued` (push returned to the deployment
/// row), `queued→claimed`, each journal step (started to finished), `between steps` (the
/// journal's own writes and the code between two steps) and `last step→answer` (the
/// poller's view after the last step that began before the answer).
#[derive(Default)]
pub struct Breakdown {
    segments: BTreeMap<String, Series>,
    order: Vec<String>,
}

fn micros(v: &serde_json::Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_micros())
}

impl Breakdown {
    fn put(&mut self, name: &str, us: i64, line: &mut Vec<String>) {
        let d = Duration::from_micros(us.max(0) as u64);
        if !self.segments.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.segments.entry(name.to_owned()).or_default().add(d);
        line.push(format!("{name} {:.1}", us as f64 / 1000.0));
    }

    /// Adds one deployment (`GET /api/deployments/{id}`), answered `took` after the push
    /// returned at wall-clock `pushed_us`; returns the round's line.
    pub fn add(&mut self, d: &serde_json::Value, pushed_us: i64, took: Duration) -> String {
        let answer = pushed_us + took.as_micros() as i64;
        let mut line = Vec::new();
        let (Some(created), Some(claimed)) = (micros(&d["created_at"]), micros(&d["started_at"]))
        else {
            return "no timestamps".into();
        };
        self.put("notify→queued", created - pushed_us, &mut line);
        self.put("queued→claimed", claimed - created, &mut line);
        let mut last = claimed;
        let mut between = 0;
        for s in d["steps"].as_array().into_iter().flatten() {
            let (Some(a), Some(b)) = (micros(&s["started_at"]), micros(&s["finished_at"])) else {
                continue;
            };
            if a >= answer {
                break;
            }
            between += a - last;
            // A step still under way when the answer came counts up to the answer only.
            let b = b.min(answer);
            let name = s["step"].as_str().unwrap_or("?");
            self.put(name, b - a, &mut line);
            if name == "health"
                && let Some(detail) = s["result"]["detail"].as_str()
            {
                line.push(format!(
                    "[{} probe(s): {detail}]",
                    s["result"]["probes"].as_u64().unwrap_or(0)
                ));
            }
            last = b;
        }
        self.put("between steps", between, &mut line);
        self.put("last step→answer", answer - last, &mut line);
        line.join(", ")
    }

    /// Each segment's median, biggest first, with its share of the sum of medians.
    pub fn print(&self) {
        let mut rows: Vec<(&String, Duration)> = self
            .order
            .iter()
            .map(|n| (n, self.segments[n].median()))
            .collect();
        let total: Duration = rows.iter().map(|r| r.1).sum();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1));
        println!("  pier by journal step (median ms, share of their sum):");
        for (name, d) in &rows {
            println!(
                "    {name:<18} {:>8.1} {:>5.1}%",
                d.as_secs_f64() * 1000.0,
                100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-9)
            );
        }
        if let Some((name, _)) = rows.first() {
            println!("  biggest: {name}");
        }
    }
}
