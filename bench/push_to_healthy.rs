//! Push-to-healthy, for both strategies: how long from a registry push until the new version
//! answers, with Pier doing every journaled step, against a floor measured in the same run:
//! a script doing the same engine work with the docker CLI.
//!
//! - `recreate`: Pier's app publishes a fixed port; "healthy" is the new version answering
//!   `GET /version` on it. Floor: `docker pull` by digest, `docker create` (same fixed port),
//!   `docker stop` of the old container, `docker start`, poll the URL every 10 ms.
//! - `blue-green`: Pier's app is behind `pier proxy`; "healthy" is the new version answering
//!   through the proxy (what users see). Floor: pull, create on an ephemeral loopback port,
//!   start, `docker port`, poll that port directly every 10 ms (no proxy, no stop of the old).
//!
//! - `recreate+signed` (issue 25): the recreate app again, but one whose images must be
//!   signed (`[[trust]]`): each version is signed (a cosign `.sig`, before its push, outside
//!   the timed part, as CI signs before it moves the tag), and Pier checks the signature
//!   before it pulls. Its median against the plain recreate lane's, in the same run, is
//!   what verification costs.
//!
//! Both sides are timed by the same poller (every 10 ms). The clock starts when the push
//! returns (the registry sends its notification as the manifest lands). Rounds interleave
//! Pier and the floor so that the machine's noise falls on both.
//!
//! `cargo bench --bench push_to_healthy` (needs what `scripts/test` sets up; 10 rounds, or
//! `BENCH_ROUNDS`). Prints each round, medians, p90, pier/floor, and Pier's time by journal
//! step; it asserts nothing about time.

#[path = "push_to_healthy/report.rs"]
mod report;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use report::{Breakdown, Series};
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

/// Polls `url` every 10 ms until it answers 200 with `want`; how long that took.
async fn first_answer(url: &str, want: &str, start: Instant) -> Duration {
    loop {
        if matches!(poll(url).await, Some((200, body)) if body == want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{url} never answered {want}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
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

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    Recreate,
    BlueGreen,
}

/// One side of the comparison for one strategy: Pier's app and the floor's own container.
struct Lane {
    strategy: Strategy,
    /// The app's images must be signed: each version is signed by this key first.
    signer: Option<Signer>,
    app: usize,
    floor_app: String,
    floor_port: u16,
    floor_old: Option<String>,
    pier: Series,
    floor: Series,
    steps: Breakdown,
    seen: Vec<String>,
}

impl Lane {
    fn new(strategy: Strategy, app: usize, signer: Option<Signer>) -> Lane {
        Lane {
            strategy,
            signer,
            app,
            floor_app: unique_app("bench-floor"),
            floor_port: free_port(),
            floor_old: None,
            pier: Series::default(),
            floor: Series::default(),
            steps: Breakdown::default(),
            seen: Vec::new(),
        }
    }

    fn name(&self) -> &'static str {
        match (self.strategy, &self.signer) {
            (Strategy::Recreate, None) => "recreate",
            (Strategy::Recreate, Some(_)) => "recreate+signed",
            (Strategy::BlueGreen, _) => "blue-green",
        }
    }

    /// Pier: push to the followed tag, time until the new version answers, then wait for
    /// the deployment to end (so the next round starts from a settled app).
    async fn pier_round(&mut self, env: &TestEnv, version: &str, count: bool) -> Duration {
        let spec = &env.apps[self.app];
        let image = TestImage::healthy(version);
        let url = format!("http://{}/version", spec.publish());
        if let Some(key) = &self.signer {
            let digest = image.build("amd64").digest;
            let reference = format!("{}/{}", env.registry_host(), spec.repo);
            let layer = signed_layer(key, simple_payload(&reference, &digest, "null"));
            push_sig_tag(&env.registry_host(), &spec.repo, &digest, &[layer]).await;
        }
        let start = Instant::now();
        env.registry().push(&spec.repo, "main", &image).await;
        let pushed = Instant::now();
        let pushed_us = chrono::Utc::now().timestamp_micros();
        // recreate: nothing may touch the fixed port while the engine swaps containers on
        // it. A connection that reaches docker-proxy before the new container's interface is
        // up sends docker-proxy's SYN into an ARP lookup that is retried only after 1 s
        // (`bash bench/recreate_traffic.sh` shows it with the CLI alone), so a poller would
        // measure its own side effect. "Healthy" is then when Pier's own health probe got its
        // answer (the journal's `health` finished_at, written after it); the URL is checked
        // once the deployment is over. blue-green: the poller goes through the proxy, which
        // sends nothing to the candidate before the switch.
        let polled = match self.strategy {
            Strategy::BlueGreen => Some(first_answer(&url, version, pushed).await),
            Strategy::Recreate => None,
        };
        let not: Vec<&str> = self.seen.iter().map(String::as_str).collect();
        let d = env
            .latest_final_of(&spec.name, &not, Duration::from_secs(120))
            .await;
        assert_eq!(d["state"], "succeeded", "{d:#}");
        let id = d["id"].as_str().unwrap().to_owned();
        self.seen.push(id.clone());
        let (_, full) = env.api_get(&format!("/deployments/{id}")).await;
        let took = polled.unwrap_or_else(|| {
            let healthy = full["steps"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["step"] == "health"))
                .and_then(|s| s["finished_at"].as_str())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .expect("a health step with its finish time")
                .timestamp_micros();
            Duration::from_micros((healthy - pushed_us).max(0) as u64)
        });
        let _ = first_answer(&url, version, Instant::now()).await;
        if count {
            let push_ms = (pushed - start).as_millis();
            let line = self.steps.add(&full, pushed_us, took);
            println!(
                "  {:<10} pier  {:>5} ms (push {push_ms} ms) | {line}",
                self.name(),
                took.as_millis()
            );
            self.pier.add(took);
        }
        took
    }

    /// The floor: the same engine work by the docker CLI, on its own container and port.
    async fn floor_round(&mut self, env: &TestEnv, version: &str, count: bool) -> Duration {
        // A fresh digest on a tag Pier does not follow.
        let spec = &env.apps[self.app];
        let digest = env
            .registry()
            .push(&spec.repo, "floor", &TestImage::healthy(version))
            .await;
        let reference = format!("{}/{}@{digest}", env.registry_host(), spec.repo);
        let label = format!("pier.app={}", self.floor_app);
        // On its own user-defined network, as Pier gives each app.
        let net = format!("--network={}", self.floor_app);
        let start = Instant::now();
        docker(&["pull", "-q", &reference]);
        let url = match self.strategy {
            Strategy::Recreate => {
                let publish = format!("127.0.0.1:{}:8080", self.floor_port);
                let id = docker(&[
                    "create", &net, "--label", &label, "-p", &publish, &reference,
                ]);
                if let Some(old) = &self.floor_old {
                    docker(&["stop", old]);
                }
                docker(&["start", &id]);
                self.replace_old(id);
                format!("http://127.0.0.1:{}/version", self.floor_port)
            }
            Strategy::BlueGreen => {
                let id = docker(&[
                    "create",
                    &net,
                    "--label",
                    &label,
                    "-p",
                    "127.0.0.1::8080",
                    &reference,
                ]);
                docker(&["start", &id]);
                let port = docker(&["port", &id, "8080/tcp"]);
                let addr = port.lines().next().unwrap_or_default().to_owned();
                self.replace_old(id);
                format!("http://{addr}/version")
            }
        };
        let took = first_answer(&url, version, start).await;
        if count {
            println!("  {:<10} floor {:>5} ms", self.name(), took.as_millis());
            self.floor.add(took);
        }
        took
    }

    /// The new floor container becomes the old one; the one before it is removed (outside
    /// the timed part, as Pier's `retire` is after its answer).
    fn replace_old(&mut self, id: String) {
        if let Some(old) = self.floor_old.replace(id) {
            let _ = Command::new("docker").args(["rm", "-f", &old]).output();
        }
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes --bench: ten rounds. `cargo test --all-targets` runs one round,
    // so the suite proves the benchmark still works without paying for it.
    let rounds: usize = if std::env::args().any(|a| a == "--bench") {
        std::env::var("BENCH_ROUNDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10)
    } else {
        1
    };
    let mut bg = AppSpec::new("bench-bg");
    bg.blue_green("soak = \"0s\"");
    let signed = AppSpec::new("bench-sig");
    let key = Signer::p256();
    let trust = format!(
        "[[trust]]\nname = \"bench\"\nrepositories = [\"{{registry}}/{}\"]\nkeys = ['''{}''']\n",
        signed.repo,
        key.pem()
    );
    let env = TestEnv::builder()
        .app(|a| a.name = unique_app("bench-rc"))
        .add_app(bg)
        .add_app(signed)
        .sources_toml(&trust)
        .start()
        .await;
    let _proxy = env.start_proxy().await;
    let mut lanes = [
        Lane::new(Strategy::Recreate, 0, None),
        Lane::new(Strategy::BlueGreen, 1, None),
        Lane::new(Strategy::Recreate, 2, Some(key)),
    ];
    let mut guards: Vec<AppGuard> = lanes.iter().map(|l| AppGuard::new(&l.floor_app)).collect();
    for lane in &lanes {
        docker(&["network", "create", &lane.floor_app]);
    }
    println!("load average at start: {}", load_average());
    // Warm-up: each side gets a serving generation (and the engine has the base layer), so
    // every counted round replaces a running version, as a real deploy does.
    for lane in &mut lanes {
        lane.pier_round(&env, &format!("w{}", lane.app), false)
            .await;
        lane.floor_round(&env, &format!("fw{}", lane.app), false)
            .await;
    }
    for round in 0..rounds {
        println!("round {round} (load {})", load_average());
        for lane in &mut lanes {
            // Alternate which side goes first, so neither always follows the other.
            let v = format!("r{round}a{}", lane.app);
            let f = format!("f{round}a{}", lane.app);
            if round % 2 == 0 {
                lane.pier_round(&env, &v, true).await;
                lane.floor_round(&env, &f, true).await;
            } else {
                lane.floor_round(&env, &f, true).await;
                lane.pier_round(&env, &v, true).await;
            }
        }
    }
    println!("load average at end: {}", load_average());
    // Issue 25: what checking the signature adds, plain recreate against signed recreate.
    let (plain, signed) = (&lanes[0].pier, &lanes[2].pier);
    println!(
        "\nsignature: recreate+signed median {} ms vs recreate {} ms: {:+} ms, ratio {:.3}",
        signed.median().as_millis(),
        plain.median().as_millis(),
        signed.median().as_millis() as i64 - plain.median().as_millis() as i64,
        signed.median().as_secs_f64() / plain.median().as_secs_f64()
    );
    for lane in &lanes {
        println!();
        println!(
            "{}: pier median {} ms p90 {} ms | floor median {} ms p90 {} ms | pier/floor {:.2}x (n={})",
            lane.name(),
            lane.pier.median().as_millis(),
            lane.pier.p90().as_millis(),
            lane.floor.median().as_millis(),
            lane.floor.p90().as_millis(),
            lane.pier.median().as_secs_f64() / lane.floor.median().as_secs_f64(),
            lane.pier.len(),
        );
        lane.steps.print();
    }
    let pier_kib = env.pier().pid().and_then(peak_rss_kib);
    let registry_kib = env.registry().pid().and_then(peak_rss_kib);
    if let (Some(p), Some(r)) = (pier_kib, registry_kib) {
        println!(
            "\npeak RSS: pier {p} KiB, docker-registry {r} KiB, ratio pier/registry {:.2}",
            p as f64 / r as f64
        );
    }
    for lane in &mut lanes {
        lane.replace_old(String::new());
    }
    for g in &mut guards {
        g.cleanup().await;
    }
    for lane in &lanes {
        let _ = Command::new("docker")
            .args(["network", "rm", &lane.floor_app])
            .output();
    }
    env.cleanup().await;
}
