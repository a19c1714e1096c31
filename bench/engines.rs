//! Push-to-healthy on three engines (issue 23): the host's own engine (`local`) and two real
//! dockerds in network namespaces, one reached over `tcp://` with TLS client certificates
//! (`edge-tls`), one over `ssh://` (`edge-ssh`), against a floor run in the same invocation.
//!
//! - Pier: two apps on all three targets, with no `health` table (a remote engine's
//!   container is judged by its image's HEALTHCHECK, read through that engine), one with
//!   `rollout = { batch = 1 }` (one engine at a time) and one with `batch = 3` (all at
//!   once). Healthy when the last engine's `health` step finished (the journal's
//!   `finished_at`, written after the engine said healthy); each round checks that every
//!   engine then runs exactly one container of the app, with the pushed digest.
//! - Floor: the docker CLI on each engine over the same transport (`--tlsverify` with the
//!   target's certificate; `ssh://` with its known-hosts file and key, multiplexed over one
//!   connection): pull by digest, create (fixed loopback port, its own network), stop the
//!   old container, start, `docker inspect` the health status every 10 ms until healthy.
//!   One engine after the other for batch 1, all three at once for batch 3.
//!
//! The clock starts when the push returns (Pier) or when the floor's first command starts.
//! Rounds interleave Pier and the floor, and which goes first alternates.
//!
//! `cargo bench --bench engines -- N` for N rounds (default 5; needs what `scripts/test` sets
//! up, and root for the namespaces). `cargo test --all-targets` runs one round. Prints each
//! round, medians, pier/floor per batch size, and Pier's and the floor's time by step and
//! engine; it asserts nothing about time.

#[path = "engines/floor.rs"]
mod floor;
#[allow(dead_code)] // Series only; push_to_healthy uses the rest
#[path = "push_to_healthy/report.rs"]
mod report;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "engines/table.rs"]
mod table;

use std::path::Path;
use std::time::{Duration, Instant};

use floor::FloorEngine;
use report::Series;
use support::*;
use table::Table;

/// The three targets, in rollout order.
const TARGETS: [&str; 3] = ["local", "edge-tls", "edge-ssh"];
/// A three-engine deployment on a loaded machine ends within this.
const DEPLOY_DEADLINE: Duration = Duration::from_secs(180);

/// One batch size: Pier's app and the floor's containers on each engine.
struct Lane {
    batch: usize,
    app: usize,
    floor: Vec<FloorEngine>,
    pier: Series,
    floor_total: Series,
    pier_steps: Table,
    floor_steps: Table,
    seen: Vec<String>,
    /// Rounds that did not deploy (not counted), with what they said.
    failures: Vec<String>,
}

impl Lane {
    /// Batch size `batch` for Pier's app `app`; the floor's own containers on each engine.
    fn new(batch: usize, app: usize, tls: &ExtraEngine, ssh: &ExtraEngine, dir: &Path) -> Lane {
        let floor_app = unique_app("bench-floor");
        let port = free_port();
        Lane {
            batch,
            app,
            floor: vec![
                FloorEngine::local(TARGETS[0], &floor_app, port),
                FloorEngine::tls(TARGETS[1], tls, &floor_app, port),
                FloorEngine::ssh(TARGETS[2], ssh, &floor_app, port, dir),
            ],
            pier: Series::default(),
            floor_total: Series::default(),
            pier_steps: Table::with_columns(&TARGETS),
            floor_steps: Table::with_columns(&TARGETS),
            seen: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Pier: push to the followed tag, wait for the deployment to end, read its journal.
    async fn pier_round(&mut self, env: &TestEnv, remotes: &[&ExtraEngine], v: &str, count: bool) {
        let spec = &env.apps[self.app];
        let digest = env
            .registry()
            .push(&spec.repo, "main", &TestImage::with_healthcheck(v))
            .await;
        let pushed_us = chrono::Utc::now().timestamp_micros();
        let not: Vec<&str> = self.seen.iter().map(String::as_str).collect();
        let d = env.latest_final_of(&spec.name, &not, DEPLOY_DEADLINE).await;
        let id = d["id"].as_str().expect("a deployment id").to_owned();
        self.seen.push(id.clone());
        let (_, full) = env.api_get(&format!("/deployments/{id}")).await;
        if full["state"] != "succeeded" {
            // Written down, not counted: on an overloaded machine the image's one-second
            // HEALTHCHECK can time out twice in a row (the floor's too).
            let failed = format!(
                "batch {} pier {v}: {} | {} | failed steps: {}",
                self.batch,
                full["state"],
                full["outcome"].as_str().unwrap_or(""),
                failed_steps(&full)
            );
            println!("  {failed}");
            self.failures.push(failed);
            return;
        }
        assert_eq!(full["resolved_digest"], digest.as_str(), "{full:#}");
        serving_everywhere(env, remotes, &spec.name, &digest).await;
        let mut steps = Table::default();
        let target = if count {
            &mut self.pier_steps
        } else {
            &mut steps
        };
        let (healthy_us, line) = target.add_pier(&full, pushed_us);
        let took = Duration::from_micros((healthy_us - pushed_us).max(0) as u64);
        if count {
            println!(
                "  batch {} pier  {:>5} ms | {line}",
                self.batch,
                took.as_millis()
            );
            self.pier.add(took);
        }
    }

    /// The floor: the same engine work by the docker CLI, on its own containers, for a
    /// digest pushed to a tag Pier does not follow.
    async fn floor_round(&mut self, env: &TestEnv, v: &str, count: bool) {
        let spec = &env.apps[self.app];
        let digest = env
            .registry()
            .push(&spec.repo, "floor", &TestImage::with_healthcheck(v))
            .await;
        let reference = format!("{}/{}@{digest}", env.registry_host(), spec.repo);
        let start = Instant::now();
        let done = if self.batch == 1 {
            let mut done = Vec::new();
            for e in &mut self.floor {
                done.push(e.deploy(&reference).await);
            }
            done
        } else {
            futures_util::future::join_all(self.floor.iter_mut().map(|e| e.deploy(&reference)))
                .await
        };
        let took = start.elapsed();
        for e in &mut self.floor {
            e.remove_stopped().await;
        }
        let done: Vec<floor::FloorSteps> = match done.into_iter().collect() {
            Ok(done) => done,
            Err(why) => {
                let failed = format!("batch {} floor {v}: {why}", self.batch);
                println!("  {failed}");
                self.failures.push(failed);
                return;
            }
        };
        if count {
            let mut line = Vec::new();
            for engine in &done {
                let mut total = Duration::ZERO;
                for (step, d) in &engine.steps {
                    self.floor_steps.put(step, &engine.target, *d);
                    line.push(format!("{}:{step} {}", engine.target, d.as_millis()));
                    total += *d;
                }
                self.floor_steps.put("engine total", &engine.target, total);
            }
            println!(
                "  batch {} floor {:>5} ms | {}",
                self.batch,
                took.as_millis(),
                line.join(" ")
            );
            self.floor_total.add(took);
        }
    }

    /// Medians, the ratio, rounds not counted, both sides by step and engine.
    fn report(&self) {
        println!("\n{}", self.summary());
        for f in &self.failures {
            println!("  not counted: {f}");
        }
        self.pier_steps.print("pier by journal step and engine");
        self.floor_steps.print("floor by step and engine");
    }

    fn summary(&self) -> String {
        format!(
            "batch {}: pier median {} ms p90 {} ms | floor median {} ms p90 {} ms | pier/floor {:.2}x (n={})",
            self.batch,
            self.pier.median().as_millis(),
            self.pier.p90().as_millis(),
            self.floor_total.median().as_millis(),
            self.floor_total.p90().as_millis(),
            self.pier.median().as_secs_f64() / self.floor_total.median().as_secs_f64().max(1e-9),
            self.pier.len(),
        )
    }
}

/// `target:step (error)` of every step row that did not succeed.
fn failed_steps(d: &serde_json::Value) -> String {
    let rows: Vec<String> = d["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["state"] != "succeeded")
        .map(|s| {
            format!(
                "{}:{} {} ({})",
                s["target"].as_str().unwrap_or("-"),
                s["step"].as_str().unwrap_or("?"),
                s["state"],
                s["error"].as_str().unwrap_or("")
            )
        })
        .collect();
    rows.join("; ")
}

/// Every engine runs exactly one container of `app`, and it carries `digest`.
async fn serving_everywhere(env: &TestEnv, remotes: &[&ExtraEngine], app: &str, digest: &str) {
    assert_eq!(
        env.running_digests_of(app).await,
        vec![digest.to_owned()],
        "local"
    );
    for (remote, name) in remotes.iter().zip(&TARGETS[1..]) {
        let filter = format!("label=pier.app={app}");
        let (ok, out) = remote.docker(&[
            "ps",
            "--filter",
            &filter,
            "--format",
            "{{.Label \"pier.digest\"}}",
        ]);
        assert!(ok, "docker ps on {name}: {out}");
        assert_eq!(out.trim(), digest, "{name} runs {out:?}");
    }
}

/// `[N]` rounds after `--`, else 5 under `cargo bench` and 1 under `cargo test`.
fn rounds() -> usize {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default = if args.iter().any(|a| a == "--bench") {
        5
    } else {
        1
    };
    args.iter().find_map(|a| a.parse().ok()).unwrap_or(default)
}

fn app_spec(prefix: &str, batch: usize) -> AppSpec {
    let mut app = AppSpec::new(prefix);
    app.health_timeout = None;
    let targets: Vec<String> = TARGETS.iter().map(|t| format!("\"{t}\"")).collect();
    app.extra_toml = format!(
        "targets = [{}]\nrollout = {{ batch = {batch}, pause = \"0s\" }}\n",
        targets.join(", ")
    );
    app
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds = rounds();
    let (env, tls, ssh) = start().await;
    let ssh_dir = tempfile::tempdir().expect("a directory for the floor's ssh");
    floor::start_ssh_master(&ssh, ssh_dir.path());
    let remotes = [&tls, &ssh];
    let mut lanes = [
        Lane::new(1, 0, &tls, &ssh, ssh_dir.path()),
        Lane::new(3, 1, &tls, &ssh, ssh_dir.path()),
    ];
    let mut guards: Vec<AppGuard> = Vec::new();
    for lane in &lanes {
        for e in &lane.floor {
            e.setup().await;
        }
        guards.push(AppGuard::new(lane.floor[0].app_name()));
    }
    println!("load average at start: {}", load_average());
    // Warm-up: each side gets a serving generation on every engine (and every engine has
    // the base layer), so each counted round replaces a running version.
    for lane in &mut lanes {
        lane.pier_round(&env, &remotes, &format!("w{}", lane.batch), false)
            .await;
        lane.floor_round(&env, &format!("fw{}", lane.batch), false)
            .await;
    }
    for round in 0..rounds {
        println!("round {round} (load {})", load_average());
        for lane in &mut lanes {
            let (v, f) = (
                format!("r{round}b{}", lane.batch),
                format!("f{round}b{}", lane.batch),
            );
            if round % 2 == 0 {
                lane.pier_round(&env, &remotes, &v, true).await;
                lane.floor_round(&env, &f, true).await;
            } else {
                lane.floor_round(&env, &f, true).await;
                lane.pier_round(&env, &remotes, &v, true).await;
            }
        }
    }
    println!("load average at end: {}", load_average());
    for lane in &lanes {
        lane.report();
    }
    for lane in &mut lanes {
        for e in &mut lane.floor {
            e.cleanup().await;
        }
    }
    floor::stop_ssh_master(&ssh, ssh_dir.path());
    for g in &mut guards {
        g.cleanup().await;
    }
    // Pier first, so that nothing recreates a container while the engines go.
    env.cleanup().await;
    let (mut tls, mut ssh) = (tls, ssh);
    tls.cleanup();
    ssh.cleanup();
}

/// The environment with the two extra engines, then Pier with the three targets: the
/// targets need the registry's port (forwarded into each namespace), which the
/// environment picks when it starts.
async fn start() -> (TestEnv, ExtraEngine, ExtraEngine) {
    let (one, three) = (app_spec("bench-e1", 1), app_spec("bench-e3", 3));
    let mut env = TestEnv::builder()
        .app(|a| *a = one)
        .add_app(three)
        .without_pier()
        .start()
        .await;
    let (tls, ssh) = tokio::join!(
        ExtraEngine::builder().forward(env.registry_port).start(),
        ExtraEngine::builder()
            .forward(env.registry_port)
            .ssh()
            .start(),
    );
    let config = format!(
        "{}\n{}\n{}",
        env.config_toml(),
        tls.tls_target_toml(TARGETS[1]),
        ssh.ssh_target_toml(TARGETS[2])
    );
    env.pier = Some(PierCommand::new(&config).start().await);
    (env, tls, ssh)
}
