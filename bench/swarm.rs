//! Push-to-converged on a two-node Docker Swarm (issue 24), against a floor run in the
//! same invocation on the same swarm.
//!
//! - Pier: an app on the `swarm` target, 2 replicas, `update = { parallelism = 1,
//!   order = "start-first", monitor = "1s" }`, a task health check of `busybox wget
//!   /health`. Converged when the `converge` step finished (the journal's `finished_at`,
//!   written once every replica ran the new spec and Swarm said `completed`); each round
//!   checks every task's image digest on its node.
//! - Floor: a service of its own with the same spec and update config, updated with
//!   `docker service update --image repo:tag@sha256:… --detach=false` (which returns once
//!   the CLI saw the update converge), plus the floor's resolve: one GET of the tag's
//!   manifest from the registry, as any tool must do to learn the digest.
//!
//! The clock starts when the push returns (Pier) or the floor's GET starts. Rounds
//! interleave, and which goes first alternates. `cargo bench --bench swarm -- N` for N
//! rounds (default 5; root, for the namespaces); `cargo test --all-targets` runs one.
//! Prints each round, medians, pier/floor; asserts nothing about time.

#[allow(dead_code)] // Series only
#[path = "push_to_healthy/report.rs"]
mod report;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::models::{
    HealthConfig, ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated, ServiceSpecUpdateConfig,
    ServiceSpecUpdateConfigOrderEnum, TaskSpec, TaskSpecContainerSpec,
};
use report::Series;
use support::swarm::*;
use support::*;

const REPLICAS: usize = 2;

fn rounds() -> usize {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default = if args.iter().any(|a| a == "--bench") {
        5
    } else {
        1
    };
    args.iter().find_map(|a| a.parse().ok()).unwrap_or(default)
}

/// The floor's service: Pier's spec for the same app, by hand (no Pier labels).
fn floor_spec(name: &str, image: &str) -> ServiceSpec {
    let s = |ms: u64| Some(Duration::from_millis(ms).as_nanos() as i64);
    let wget = [
        "CMD",
        "/bin/busybox",
        "wget",
        "-q",
        "-O",
        "/dev/null",
        "http://127.0.0.1:8080/health",
    ];
    ServiceSpec {
        name: Some(name.to_owned()),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_owned()),
                health_check: Some(HealthConfig {
                    test: Some(wget.iter().map(|a| a.to_string()).collect()),
                    interval: s(2000),
                    timeout: s(5000),
                    retries: Some(3),
                    start_period: s(1000),
                    start_interval: s(500),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated {
                replicas: Some(REPLICAS as i64),
            }),
            ..Default::default()
        }),
        update_config: Some(ServiceSpecUpdateConfig {
            parallelism: Some(1),
            monitor: s(1000),
            order: Some(ServiceSpecUpdateConfigOrderEnum::START_FIRST),
            ..Default::default()
        }),
        labels: Some(HashMap::new()),
        ..Default::default()
    }
}

/// The floor's resolve: the tag's manifest, by one GET, its digest computed.
async fn resolve(registry: &str, repo: &str, tag: &str) -> String {
    use sha2::Digest;
    let url = format!("http://{registry}/v2/{repo}/manifests/{tag}");
    let body = reqwest::Client::new()
        .get(&url)
        .header(
            "Accept",
            "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
        )
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("the manifest")
        .bytes()
        .await
        .expect("its body");
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))
}

async fn pier_round(s: &SwarmEnv, v: &str) -> Option<Duration> {
    let digest = s.env.push(&TestImage::healthy(v), "main").await;
    let pushed_us = chrono::Utc::now().timestamp_micros();
    let d = s.final_deployment().await;
    if d["state"] != "succeeded" {
        println!("  pier {v}: {} {}: not counted", d["state"], d["error"]);
        return None;
    }
    s.assert_tasks_run(&digest, REPLICAS).await;
    let converge = d["steps"]
        .as_array()
        .and_then(|a| a.iter().find(|st| st["step"] == "converge"))
        .expect("a converge step");
    let done = chrono::DateTime::parse_from_rfc3339(converge["finished_at"].as_str()?)
        .ok()?
        .timestamp_micros();
    Some(Duration::from_micros((done - pushed_us).max(0) as u64))
}

async fn floor_round(s: &SwarmEnv, name: &str, v: &str) -> Option<Duration> {
    let repo = format!("{}-floor", s.env.repo());
    s.env
        .registry()
        .push(&repo, "main", &TestImage::healthy(v))
        .await;
    let start = Instant::now();
    let digest = resolve(&s.env.registry_host(), &repo, "main").await;
    let image = format!("{}/{repo}:main@{digest}", s.env.registry_host());
    let (ok, out) = s.swarm.manager.docker(&[
        "service",
        "update",
        "--image",
        &image,
        "--detach=false",
        "--quiet",
        name,
    ]);
    let took = start.elapsed();
    if !ok {
        println!("  floor {v}: {out}: not counted");
        return None;
    }
    Some(took)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds = rounds();
    let s = SwarmEnv::start(
        "replicas = 2, update = { parallelism = 1, order = \"start-first\", monitor = \"1s\" }",
    )
    .await;
    let floor = unique_app("floor");
    let repo = format!("{}-floor", s.env.repo());
    let first = s
        .env
        .registry()
        .push(&repo, "main", &TestImage::healthy("f0"))
        .await;
    let image = format!("{}/{repo}:main@{first}", s.env.registry_host());
    s.engine()
        .await
        .create_service(floor_spec(&floor, &image), None)
        .await
        .expect("the floor's service");
    // Warm-up: both services run a first version, and both nodes have the base layer.
    let _ = pier_round(&s, "w0").await;
    let _ = floor_round(&s, &floor, "fw0").await;
    let (mut pier, mut floor_times) = (Series::default(), Series::default());
    for round in 0..rounds {
        let (v, f) = (format!("r{round}"), format!("f{round}"));
        let (p, fl) = if round % 2 == 0 {
            let p = pier_round(&s, &v).await;
            (p, floor_round(&s, &floor, &f).await)
        } else {
            let fl = floor_round(&s, &floor, &f).await;
            (pier_round(&s, &v).await, fl)
        };
        println!(
            "round {round}: pier {:?} ms | floor {:?} ms",
            p.map(|d| d.as_millis()),
            fl.map(|d| d.as_millis())
        );
        if let (Some(p), Some(fl)) = (p, fl) {
            pier.add(p);
            floor_times.add(fl);
        }
    }
    println!(
        "\nswarm, {REPLICAS} replicas on 2 nodes: pier median {} ms p90 {} ms | floor (resolve + \
         docker service update --detach=false) median {} ms p90 {} ms | pier/floor {:.2}x (n={})",
        pier.median().as_millis(),
        pier.p90().as_millis(),
        floor_times.median().as_millis(),
        floor_times.p90().as_millis(),
        pier.median().as_secs_f64() / floor_times.median().as_secs_f64().max(1e-9),
        pier.len()
    );
    let _ = s.engine().await.remove_service(&floor).await;
    s.cleanup().await;
}
