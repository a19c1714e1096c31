//! Following a busy log: what one viewer of an app writing 10,000 lines a second costs Pier.
//!
//! One Pier (`pier serve`, this build) deploys an app whose container prints a steady
//! `BENCH_RATE` lines a second (default 10,000), numbered, about 100 bytes each, from a
//! busybox sh loop paced by `/proc/uptime`; it has a secret (`env:`), so every line goes
//! through the mask as an app's with secrets does. It prints for the whole run. Windows of
//! `BENCH_SECS` (default 10) alternate, one without a viewer, then one with a viewer, for
//! each kind of viewer in turn, over `BENCH_ROUNDS` rounds (default 3):
//!
//! - `api`: `GET /api/apps/{app}/logs?follow=true&tail=0`, read by this process;
//! - `cli`: `pier logs APP -f -n 0` (a process of its own), its stdout read by this one;
//! - `page`: the log view's event stream (`/apps/{app}/logs/events?tail=0`) with a session.
//!
//! A viewer is started, and its window begins once its first line arrived, so that the
//! start of a stream is not in it. Each window reads Pier's CPU time (user plus system,
//! `/proc/PID/stat`) at its start and end, and the engine's (`dockerd`) beside it; the app's
//! own rate is the difference of the numbers of its last line in the engine's log
//! (`docker logs --tail 1`) at either end, and the viewer's the lines it received, whose
//! numbers it checks for gaps. Prints every window, then per viewer the medians of Pier's
//! CPU without and with it (as % of one core), their difference, Pier's CPU per line, and
//! whether the difference is within 5% of one core. Asserts nothing about time; it does
//! assert that every viewer received lines and none went missing.
//!
//! `cargo bench --bench log_stream` (needs what `scripts/test` sets up). `BENCH_PIER=PATH`
//! measures that `pier` binary instead of this build's (an earlier commit's, for a before
//! and after); the viewers' `pier logs` is this build's either way. `cargo test
//! --all-targets` runs one round of 2 s windows at 1,000 lines a second, so the suite proves
//! it still works without paying for it.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use support::*;

/// The target: one viewer costs Pier at most this share of one core.
const TARGET_PCT: f64 = 5.0;

/// Prints `RATE` numbered lines a second while httpd serves: as many as are due by
/// `/proc/uptime` (centiseconds) since it started, then a 5 ms nap, so the rate holds
/// however long a line takes to write.
const STEADY: &str = "trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & \
    pad=$(/bin/busybox printf '%085d' 0); \
    read u _ < /proc/uptime; t0=${u%.*}${u#*.}; i=0; \
    while true; do \
        read u _ < /proc/uptime; now=${u%.*}${u#*.}; due=$(( (now - t0) * RATE / 100 )); \
        while [ $i -lt $due ]; do echo \"$i $pad\"; i=$((i+1)); done; \
        /bin/busybox usleep 5000; \
    done";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    None,
    Api,
    Cli,
    Page,
}

impl Kind {
    const VIEWERS: [Kind; 3] = [Kind::Api, Kind::Cli, Kind::Page];

    fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::Api => "api",
            Kind::Cli => "cli",
            Kind::Page => "page",
        }
    }
}

/// The number an app's line starts with.
fn number(text: &str) -> Option<u64> {
    text.split(' ').next()?.parse().ok()
}

/// What a viewer received: lines, and numbers skipped between consecutive ones.
#[derive(Default)]
struct Tally {
    lines: u64,
    missing: u64,
    last: Option<u64>,
}

impl Tally {
    fn saw(&mut self, text: &str) {
        let Some(n) = number(text) else { return };
        self.lines += 1;
        if let Some(last) = self.last {
            self.missing += n.saturating_sub(last + 1);
        }
        self.last = Some(n);
    }
}

/// One viewer following the app's log in a task of this process, counting what it gets.
struct Viewer {
    tally: Arc<Mutex<Tally>>,
    task: tokio::task::JoinHandle<()>,
}

impl Viewer {
    async fn start(kind: Kind, env: &TestEnv, cookie: &str) -> Viewer {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let t = tally.clone();
        let app = env.app().to_owned();
        let task = match kind {
            Kind::Api => {
                let url = env.pier_url(&format!("/api/apps/{app}/logs?follow=true&tail=0"));
                let resp = reqwest::Client::builder()
                    .no_proxy()
                    .build()
                    .expect("client")
                    .get(url)
                    .bearer_auth(&env.admin_token)
                    .send()
                    .await
                    .expect("the log API answers");
                assert_eq!(resp.status(), 200);
                tokio::spawn(async move {
                    let mut body = resp.bytes_stream();
                    let mut buf = Vec::new();
                    while let Some(Ok(chunk)) = body.next().await {
                        buf.extend_from_slice(&chunk);
                        let end = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                        let mut tally = t.lock().unwrap();
                        for line in buf[..end].split(|b| *b == b'\n') {
                            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                                tally.saw(v["text"].as_str().unwrap_or_default());
                            }
                        }
                        drop(tally);
                        buf.drain(..end);
                    }
                })
            }
            Kind::Cli => {
                let mut cli = PierLogs::start(
                    &env.pier_url(""),
                    &env.admin_token,
                    &[&app, "-f", "-n", "0"],
                );
                tokio::spawn(async move {
                    while let Some(line) = cli.next_line().await {
                        t.lock().unwrap().saw(&line);
                    }
                })
            }
            Kind::Page => {
                let url = env.pier_url(&format!("/apps/{app}/logs/events?tail=0"));
                let mut events = EventStream::open_as(&url, Some(cookie)).await;
                tokio::spawn(async move {
                    let forever = tokio::time::Instant::now() + Duration::from_secs(86_400);
                    while let Next::Event(e) = events.next_before(forever).await {
                        if e.name == "line"
                            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.data)
                        {
                            t.lock()
                                .unwrap()
                                .saw(v["text"].as_str().unwrap_or_default());
                        }
                    }
                })
            }
            Kind::None => unreachable!("no viewer to start"),
        };
        let viewer = Viewer { tally, task };
        wait_until(
            &format!("the {} viewer's first line", kind.name()),
            Duration::from_secs(30),
            || async { (viewer.lines() > 0).then_some(()) },
        )
        .await;
        viewer
    }

    fn lines(&self) -> u64 {
        self.tally.lock().unwrap().lines
    }

    /// Stops it (a `pier logs` child is killed as its task drops it); lines missing.
    fn stop(self) -> u64 {
        self.task.abort();
        self.tally.lock().unwrap().missing
    }
}

/// The number of the app's last line in the engine's log.
fn last_number(container: &str) -> u64 {
    let (ok, out) = docker_cli(&["logs", "--tail", "1", container]);
    assert!(ok, "docker logs: {out}");
    out.lines().rev().find_map(number).unwrap_or(0)
}

/// One window's figures.
struct Window {
    kind: Kind,
    pier_pct: f64,
    engine_pct: f64,
    /// Lines a second the app wrote, from the engine's log.
    written: f64,
    /// Lines a second the viewer received.
    received: f64,
}

/// A process's CPU time over a wall-clock span, as % of one core (ticks are 1/100 s).
fn pct(ticks: u64, span: Duration) -> f64 {
    ticks as f64 / span.as_secs_f64()
}

/// Measures one window of `secs` with `viewer` (or none) following the log.
async fn window(
    kind: Kind,
    viewer: Option<&Viewer>,
    secs: Duration,
    pier: u32,
    engine: Option<u32>,
    container: &str,
) -> Window {
    let engine_ticks = || engine.map_or(0, cpu_ticks);
    let (n0, l0) = (last_number(container), viewer.map_or(0, Viewer::lines));
    let (p0, e0, start) = (cpu_ticks(pier), engine_ticks(), Instant::now());
    tokio::time::sleep(secs).await;
    let (p1, e1, span) = (cpu_ticks(pier), engine_ticks(), start.elapsed());
    let (n1, l1) = (last_number(container), viewer.map_or(0, Viewer::lines));
    let w = Window {
        kind,
        pier_pct: pct(p1 - p0, span),
        engine_pct: pct(e1 - e0, span),
        written: n1.saturating_sub(n0) as f64 / span.as_secs_f64(),
        received: (l1 - l0) as f64 / span.as_secs_f64(),
    };
    println!(
        "  {:<5} pier {:>5.1}% | dockerd {:>5.1}% | app wrote {:>6.0} lines/s{}",
        kind.name(),
        w.pier_pct,
        w.engine_pct,
        w.written,
        match viewer {
            Some(_) => format!(" | viewer received {:>6.0} lines/s", w.received),
            None => String::new(),
        }
    );
    w
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Per viewer: the medians without and with it over the rounds (each viewer window against
/// the window without a viewer just before it), and what one line cost.
fn summary(windows: &[Window]) {
    let baseline = median(
        windows
            .iter()
            .filter(|w| w.kind == Kind::None)
            .map(|w| w.pier_pct)
            .collect(),
    );
    println!("\nwithout a viewer: pier {baseline:.2}% of one core (median)");
    for kind in Kind::VIEWERS {
        // A viewer's window follows its own window without a viewer.
        let pairs: Vec<(&Window, &Window)> = windows
            .windows(2)
            .filter(|p| p[0].kind == Kind::None && p[1].kind == kind)
            .map(|p| (&p[0], &p[1]))
            .collect();
        let without = median(pairs.iter().map(|(a, _)| a.pier_pct).collect());
        let with = median(pairs.iter().map(|(_, b)| b.pier_pct).collect());
        let diff = median(pairs.iter().map(|(a, b)| b.pier_pct - a.pier_pct).collect());
        let received = median(pairs.iter().map(|(_, b)| b.received).collect());
        let written = median(pairs.iter().map(|(_, b)| b.written).collect());
        // % of a core is 10 ms of CPU a second: per line, 10,000 us * pct / lines.
        let per_line_us = diff * 10_000.0 / received.max(1.0);
        println!(
            "{}: viewer received {received:.0} lines/s (app wrote {written:.0}/s) | pier \
             {without:.2}% without, {with:.2}% with, difference {diff:+.2}% of one core \
             ({per_line_us:.2} us per line) | target <= {TARGET_PCT}%: {} (n={})",
            kind.name(),
            if diff <= TARGET_PCT { "met" } else { "MISSED" },
            pairs.len(),
        );
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let full = std::env::args().any(|a| a == "--bench");
    let rate = env_or("BENCH_RATE", if full { 10_000 } else { 1_000 });
    let secs = Duration::from_secs(env_or("BENCH_SECS", if full { 10 } else { 2 }));
    let rounds = env_or("BENCH_ROUNDS", if full { 3 } else { 1 });
    let script = STEADY.replace("RATE", &rate.to_string());
    let builder = TestEnv::builder().app(|a| a.name = unique_app("bench-logs"));
    let mut builder = app_running(builder, &script);
    if let Ok(program) = std::env::var("BENCH_PIER") {
        builder = builder.program(program);
    }
    let env = builder.start().await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env
        .latest_final_of(env.app(), &[], Duration::from_secs(120))
        .await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let container = env
        .engine
        .running_containers_of_app(env.app())
        .await
        .pop()
        .and_then(|c| c.id)
        .expect("the app's container");
    let pier = env.pier().pid().expect("pier's pid");
    // The oldest dockerd: the host's own, not one a test started in a namespace.
    let engine = std::process::Command::new("pgrep")
        .args(["-o", "-x", "dockerd"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    println!(
        "{rate} lines/s asked, windows of {} s, {rounds} rounds; load average at start: {}",
        secs.as_secs(),
        load_average()
    );
    let mut windows = Vec::new();
    let mut missing = 0;
    for round in 1..=rounds {
        println!("round {round} (load {})", load_average());
        for kind in Kind::VIEWERS {
            windows.push(window(Kind::None, None, secs, pier, engine, &container).await);
            let viewer = Viewer::start(kind, &env, &admin.cookie).await;
            windows.push(window(kind, Some(&viewer), secs, pier, engine, &container).await);
            missing += viewer.stop();
        }
    }
    println!("load average at end: {}", load_average());
    summary(&windows);
    env.cleanup().await;
    assert!(
        windows
            .iter()
            .all(|w| w.kind == Kind::None || w.received > 0.0),
        "every viewer received lines"
    );
    assert_eq!(
        missing, 0,
        "lines missing between the lines a viewer received"
    );
}
