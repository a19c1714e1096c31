//! Times by step and engine, over rounds: Pier's read from its journal
//! (`GET /api/deployments/{id}`: each step row's `target`, `started_at`, `finished_at`),
//! the floor's from its own clock.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::report::Series;

/// Rows are steps in the order first seen, columns are engines; `-` stands for the
/// deployment as a whole (`notify→queued`, `queued→claimed`, `resolve`).
#[derive(Default)]
pub struct Table {
    cells: BTreeMap<(String, String), Series>,
    rows: Vec<String>,
    columns: Vec<String>,
}

const WHOLE: &str = "-";

fn micros(v: &serde_json::Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_micros())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Table {
    /// Columns in this order (engines not named here are added as seen).
    pub fn with_columns(columns: &[&str]) -> Table {
        Table {
            columns: std::iter::once(WHOLE)
                .chain(columns.iter().copied())
                .map(str::to_owned)
                .collect(),
            ..Table::default()
        }
    }

    pub fn put(&mut self, step: &str, column: &str, d: Duration) {
        if !self.rows.iter().any(|r| r == step) {
            self.rows.push(step.to_owned());
        }
        if !self.columns.iter().any(|c| c == column) {
            self.columns.push(column.to_owned());
        }
        self.cells
            .entry((step.to_owned(), column.to_owned()))
            .or_default()
            .add(d);
    }

    /// One deployment of Pier's, pushed at wall-clock `pushed_us`: every step row with
    /// both times, under its engine. Returns when the last engine's `health` finished
    /// (healthy everywhere), and the round's line.
    pub fn add_pier(&mut self, d: &serde_json::Value, pushed_us: i64) -> (i64, String) {
        let mut line = Vec::new();
        let mut put = |t: &mut Table, step: &str, col: &str, us: i64| {
            t.put(step, col, Duration::from_micros(us.max(0) as u64));
            line.push(format!("{col}:{step} {:.0}", us as f64 / 1000.0));
        };
        if let (Some(created), Some(claimed)) = (micros(&d["created_at"]), micros(&d["started_at"]))
        {
            put(self, "notify→queued", WHOLE, created - pushed_us);
            put(self, "queued→claimed", WHOLE, claimed - created);
        }
        let mut healthy = None::<i64>;
        let mut span: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for s in d["steps"].as_array().into_iter().flatten() {
            let (Some(a), Some(b)) = (micros(&s["started_at"]), micros(&s["finished_at"])) else {
                continue;
            };
            let step = s["step"].as_str().unwrap_or("?");
            let target = s["target"].as_str().unwrap_or(WHOLE);
            put(self, step, target, b - a);
            if target != WHOLE && step != "retire" {
                let e = span.entry(target.to_owned()).or_insert((a, b));
                e.0 = e.0.min(a);
                e.1 = e.1.max(b);
            }
            if step == "health" && target != WHOLE {
                healthy = Some(healthy.map_or(b, |h| h.max(b)));
            }
        }
        // An engine's part from its first step's start to its `switch`: with batch 1 the
        // parts follow each other, with batch 3 they overlap.
        for (target, (a, b)) in span {
            put(self, "engine total", &target, b - a);
        }
        (
            healthy.expect("a health step on some engine"),
            line.join(" "),
        )
    }

    /// Each step's median per engine, in ms.
    pub fn print(&self, title: &str) {
        println!("  {title} (median ms):");
        let mut header = format!("    {:<16}", "step");
        for c in &self.columns {
            header.push_str(&format!(" {c:>10}"));
        }
        println!("{header}");
        for r in &self.rows {
            let mut row = format!("    {r:<16}");
            for c in &self.columns {
                match self.cells.get(&(r.clone(), c.clone())) {
                    Some(s) => row.push_str(&format!(" {:>10.1}", ms(s.median()))),
                    None => row.push_str(&format!(" {:>10}", "")),
                }
            }
            println!("{row}");
        }
    }
}
