//! Push-to-healthy: how long from a registry push until the new version answers, with Pier
//! doing resolve, pull, verify, create, stop_old, start, health, switch and retire, against a
//! baseline measured in the same run: the docker CLI doing the same pull by digest, run
//! (create and start with the same published port) and polling for the first 200.
//!
//! `cargo bench --bench push_to_healthy` (needs what `scripts/test` sets up). Prints each
//! round and the ratio of medians; it asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Where Pier's time went, from its own journal: webhook-to-claim, then each step.
async fn breakdown(env: &TestEnv, pushed_at: chrono::DateTime<chrono::Utc>) -> String {
    let (_, app) = env.api_get(&format!("/apps/{}", env.app())).await;
    let id = app["latest_deployment"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (_, d) = env.api_get(&format!("/deployments/{id}")).await;
    let t = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.timestamp_micros())
    };
    let mut out = Vec::new();
    if let Some(c) = t(&d["created_at"]) {
        out.push(format!(
            "push→queued {}ms",
            (c - pushed_at.timestamp_micros()) / 1000
        ));
    }
    let mut last = None;
    if let (Some(c), Some(s)) = (t(&d["created_at"]), t(&d["started_at"])) {
        out.push(format!("queued→claimed {}ms", (s - c) / 1000));
    }
    for s in d["steps"].as_array().into_iter().flatten() {
        if let (Some(a), Some(b)) = (t(&s["started_at"]), t(&s["finished_at"])) {
            out.push(format!(
                "{} {}ms",
                s["step"].as_str().unwrap_or("?"),
                (b - a) / 1000
            ));
            last = Some(b);
        }
    }
    if let (Some(l), Some(f)) = (last, t(&d["finished_at"])) {
        out.push(format!("→finished {}ms", (f - l) / 1000));
    }
    out.join(", ")
}

async fn first_answer(url: &str, want: &str) -> Duration {
    let start = Instant::now();
    let mut delay = Duration::from_millis(5);
    loop {
        let t = Instant::now();
        let got = poll(url).await;
        if std::env::var("BENCH_TRACE").is_ok() {
            eprintln!(
                "  +{:>5}ms poll took {:>4}ms: {got:?}",
                start.elapsed().as_millis(),
                t.elapsed().as_millis()
            );
        }
        if matches!(&got, Some((200, body)) if body == want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{url} never answered {want}"
        );
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(20));
    }
}

/// One GET with a short timeout: a SYN sent while the engine is still wiring the new
/// container's network is dropped and retransmitted only after 1 s, which would measure
/// the kernel's retransmit timer instead of the deployment.
async fn poll(url: &str) -> Option<(u16, String)> {
    thread_local! {
        static CLIENT: reqwest::Client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_millis(100))
            .build()
            .expect("client");
    }
    let resp = CLIENT.with(|c| c.clone()).get(url).send().await.ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().await.ok()?))
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes --bench: five rounds. `cargo test --all-targets` runs one round,
    // so the suite proves the benchmark still works without paying for it.
    let rounds = if std::env::args().any(|a| a == "--bench") {
        5
    } else {
        1
    };
    let env = TestEnv::start().await;
    let mut pier = Vec::new();
    let mut cli = Vec::new();
    let baseline_port = free_port();
    let baseline_app = unique_app("bench-cli");
    let mut guard = AppGuard::new(&baseline_app);
    for round in 0..rounds {
        // Pier: push to the followed tag; the clock starts when the push returns.
        let version = format!("p{round}");
        let image = TestImage::healthy(&version);
        let t = Instant::now();
        env.push(&image, "main").await;
        let pushed = t.elapsed();
        let pushed_at = chrono::Utc::now();
        let took = first_answer(&env.app_url("/version"), &version).await;
        pier.push(took);

        // Baseline: a fresh digest on another tag (Pier ignores it), pulled and run by the CLI.
        let version = format!("c{round}");
        let digest = env.push(&TestImage::healthy(&version), "bench").await;
        let reference = format!("{}@{digest}", env.image());
        let start = Instant::now();
        docker(&["pull", "-q", &reference]);
        let id = docker(&[
            "run",
            "-d",
            "--label",
            &format!("pier.app={baseline_app}"),
            "-p",
            &format!("127.0.0.1:{baseline_port}:8080"),
            &reference,
        ]);
        let url = format!("http://127.0.0.1:{baseline_port}/version");
        let _ = first_answer(&url, &version).await;
        let took_cli = start.elapsed();
        cli.push(took_cli);
        docker(&["rm", "-f", &id]);
        println!(
            "round {round}: pier push-to-healthy {:>5} ms (push itself {} ms) | docker CLI pull+run+first 200 {:>5} ms",
            took.as_millis(),
            pushed.as_millis(),
            took_cli.as_millis()
        );
        println!(
            "         pier journal: {}",
            breakdown(&env, pushed_at).await
        );
    }
    let (p, c) = (median(pier), median(cli));
    println!(
        "median: pier {} ms, docker CLI {} ms, ratio pier/cli {:.2}",
        p.as_millis(),
        c.as_millis(),
        p.as_secs_f64() / c.as_secs_f64()
    );
    // Memory: Pier's peak RSS over the whole run, against the registry's (an always-on server
    // of the same machine that did its share of this run's work).
    let pier_kib = env.pier().pid().and_then(peak_rss_kib);
    let registry_kib = env.registry().pid().and_then(peak_rss_kib);
    if let (Some(p), Some(r)) = (pier_kib, registry_kib) {
        println!(
            "peak RSS: pier {} KiB, docker-registry {} KiB, ratio pier/registry {:.2}",
            p,
            r,
            p as f64 / r as f64
        );
    }
    guard.cleanup().await;
    env.cleanup().await;
}
