//! Many apps (issue 12, item 7): `BENCH_APPS` apps (200) configured, one push to each at
//! once, `BENCH_WORKERS` workers (4). Checks that every app is deployed, that at most
//! `workers` deployments ran at any moment (from the journal's step timestamps), and that
//! no app starved (each one's wait in the queue, and claims in the order the pushes were
//! queued); prints the total time against the sum of the apps' floors divided by `workers`.
//!
//! The floor of one app is the docker CLI deploying a fresh digest of its image on a fixed
//! port: `docker pull` by digest, `docker create`, `docker start`, poll `GET /version` every
//! 10 ms. It is measured on `BENCH_FLOOR_SAMPLE` (20) apps, one after another, right after
//! Pier's run; the sum of 200 floors is 200 times their mean.
//!
//! `cargo bench --bench many_apps` (needs what `scripts/test` sets up). `cargo test
//! --all-targets` runs it with 6 apps and 2 workers, so the suite proves it still works.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use support::*;

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

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

/// One deployment as the database has it: when it was queued and claimed, and the span of
/// its journal steps.
#[derive(sqlx::FromRow)]
struct Row {
    app: String,
    state: String,
    created_us: i64,
    claimed_us: i64,
    first_step_us: Option<i64>,
    last_step_us: Option<i64>,
}

/// The most deployments whose journal spans overlap at one instant.
fn max_concurrent(rows: &[Row]) -> usize {
    let mut edges: Vec<(i64, i32)> = rows
        .iter()
        .filter_map(|r| Some([(r.first_step_us?, 1), (r.last_step_us?, -1)]))
        .flatten()
        .collect();
    // An end before a start at the same microsecond: a worker that finishes one and starts
    // the next is one worker.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, e) in edges {
        now += e;
        most = most.max(now);
    }
    most as usize
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// The floor of one app: the docker CLI deploying `reference` on `port`.
async fn floor(reference: &str, port: u16, version: &str, app: &str) -> Duration {
    let start = Instant::now();
    docker(&["pull", "-q", reference]);
    let publish = format!("127.0.0.1:{port}:8080");
    let label = format!("pier.app={app}");
    let id = docker(&["create", "--label", &label, "-p", &publish, reference]);
    docker(&["start", &id]);
    let url = format!("http://127.0.0.1:{port}/version");
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_millis(100))
        .build()
        .expect("client");
    loop {
        if let Ok(r) = client.get(&url).send().await
            && r.status() == 200
            && r.text().await.ok().as_deref() == Some(version)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{url} never answered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    took
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let full = std::env::args().any(|a| a == "--bench");
    let apps = env_or("BENCH_APPS", if full { 200 } else { 6 });
    let workers = env_or("BENCH_WORKERS", if full { 4 } else { 2 });
    let sample = env_or("BENCH_FLOOR_SAMPLE", if full { 20 } else { 2 }).min(apps);
    // More apps than the engine's default address pools hold networks (about 30): each
    // app's network gets a /27 of Pier's own pool.
    let mut builder = TestEnv::builder()
        .workers(workers)
        .server_toml("app_subnets = \"10.213.0.0/16\"");
    builder = builder.app(|a| a.name = unique_app("many"));
    for _ in 1..apps {
        builder = builder.add_app(AppSpec::new("many"));
    }
    let env = builder.start().await;
    let host = env.registry_host();
    println!(
        "{apps} apps, {workers} workers; load average at start: {}",
        load_average()
    );

    // Every layer the pushes need is in the registry before the clock starts (a tag Pier
    // does not follow), so "at once" is a burst of manifest PUTs and notifications.
    let staged: Vec<(usize, String)> = futures_util::stream::iter(0..apps)
        .map(|i| {
            let env = &env;
            async move {
                let image = TestImage::healthy(&format!("v{i}"));
                let spec = &env.apps[i];
                (i, env.registry().push(&spec.repo, "staged", &image).await)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(staged.len(), apps);

    let start_us = chrono::Utc::now().timestamp_micros();
    let start = Instant::now();
    futures_util::stream::iter(0..apps)
        .map(|i| {
            let env = &env;
            async move {
                let image = TestImage::healthy(&format!("v{i}"));
                env.registry().push(&env.apps[i].repo, "main", &image).await
            }
        })
        .buffer_unordered(apps)
        .collect::<Vec<_>>()
        .await;
    let pushed = start.elapsed();
    println!("pushes done in {} ms", pushed.as_millis());

    let names: Vec<String> = env.apps.iter().map(|a| a.name.clone()).collect();
    let rows: Vec<Row> = wait_until(
        "every app's deployment final",
        Duration::from_secs(1800),
        || async {
            let rows: Vec<Row> = sqlx::query_as(
                "SELECT d.app, d.state,
                        (extract(epoch FROM d.created_at) * 1e6)::bigint AS created_us,
                        (extract(epoch FROM coalesce(d.started_at, now())) * 1e6)::bigint
                            AS claimed_us,
                        (extract(epoch FROM min(s.started_at)) * 1e6)::bigint AS first_step_us,
                        (extract(epoch FROM max(s.finished_at)) * 1e6)::bigint AS last_step_us
                 FROM deployments d LEFT JOIN deployment_steps s ON s.deployment_id = d.id
                 WHERE d.app = ANY($1)
                 GROUP BY d.id",
            )
            .bind(&names)
            .fetch_all(&env.db.pool)
            .await
            .ok()?;
            let done = rows
                .iter()
                .filter(|r| !matches!(r.state.as_str(), "queued" | "running"))
                .count();
            (done == apps && rows.len() == apps).then_some(rows)
        },
    )
    .await;
    let total_us = rows
        .iter()
        .filter_map(|r| r.last_step_us)
        .max()
        .unwrap_or(0)
        - start_us;
    let failed: Vec<&Row> = rows.iter().filter(|r| r.state != "succeeded").collect();
    let concurrent = max_concurrent(&rows);
    let mut waits: Vec<i64> = rows.iter().map(|r| r.claimed_us - r.created_us).collect();
    waits.sort();
    let median_wait = waits[waits.len() / 2];
    let max_wait = *waits.last().unwrap();
    // FIFO: claims in the order deployments were queued. An inversion is a deployment
    // claimed before one queued earlier than it (beyond 1 ms, the clock's noise).
    let mut by_queue: Vec<&Row> = rows.iter().collect();
    by_queue.sort_by_key(|r| r.created_us);
    let mut latest_claim = i64::MIN;
    let mut out_of_order = 0;
    for r in &by_queue {
        if r.claimed_us + 1000 < latest_claim {
            out_of_order += 1;
        }
        latest_claim = latest_claim.max(r.claimed_us);
    }
    let mut spans: Vec<i64> = rows
        .iter()
        .filter_map(|r| Some(r.last_step_us? - r.first_step_us?))
        .collect();
    spans.sort();
    let queued_spread = by_queue.last().unwrap().created_us - by_queue[0].created_us;
    let step_medians: Vec<(String, f64, f64)> = sqlx::query_as(
        "SELECT s.step,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY
                    extract(epoch FROM s.finished_at - s.started_at) * 1e3)::float8,
                max(extract(epoch FROM s.finished_at - s.started_at) * 1e3)::float8
         FROM deployment_steps s JOIN deployments d ON d.id = s.deployment_id
         WHERE d.app = ANY($1) GROUP BY s.step ORDER BY 2 DESC",
    )
    .bind(&names)
    .fetch_all(&env.db.pool)
    .await
    .expect("step medians");

    // The floor, on a sample of the apps: a fresh digest each (a tag Pier does not follow).
    let mut floors = Vec::new();
    for (i, spec) in env.apps.iter().take(sample).enumerate() {
        let version = format!("floor{i}");
        let digest = env
            .registry()
            .push(&spec.repo, "floor", &TestImage::healthy(&version))
            .await;
        let reference = format!("{host}/{}@{digest}", spec.repo);
        floors.push(floor(&reference, free_port(), &version, &spec.name).await);
    }
    let floor_mean = floors.iter().sum::<Duration>() / floors.len() as u32;
    // The floor at the same concurrency: `workers` CLI scripts at once, over a sample of
    // apps, each a fresh digest; its throughput extrapolated to every app.
    let parallel_n = (sample * 2).min(apps).max(workers);
    let mut jobs = Vec::new();
    for (i, spec) in env.apps.iter().take(parallel_n).enumerate() {
        let version = format!("floorp{i}");
        let digest = env
            .registry()
            .push(&spec.repo, "floorp", &TestImage::healthy(&version))
            .await;
        jobs.push((
            format!("{host}/{}@{digest}", spec.repo),
            version,
            spec.name.clone(),
        ));
    }
    let queue = std::sync::Arc::new(std::sync::Mutex::new(jobs));
    let started = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..workers {
        let queue = queue.clone();
        // A thread each: the CLI calls block, and must not wait on one another.
        streams.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            loop {
                let Some((reference, version, app)) = queue.lock().unwrap().pop() else {
                    break;
                };
                rt.block_on(floor(&reference, free_port(), &version, &app));
            }
        }));
    }
    for s in streams {
        s.join().expect("floor stream");
    }
    let parallel_wall = started.elapsed();
    let parallel_total = parallel_wall * apps as u32 / parallel_n as u32;
    let floor_sum = floor_mean * apps as u32;
    let ideal = floor_sum / workers as u32;

    println!("load average at end: {}", load_average());
    println!(
        "deployed: {}/{apps} succeeded{}",
        apps - failed.len(),
        failed
            .first()
            .map(|r| format!(" (first other: {} {})", r.app, r.state))
            .unwrap_or_default()
    );
    println!(
        "queued over {:.0} ms (pushes took {} ms)",
        ms(queued_spread),
        pushed.as_millis()
    );
    println!("most deployments running at once: {concurrent} (workers: {workers})");
    println!(
        "wait in queue: median {:.0} ms, max {:.0} ms (max/median {:.2}); claims out of queue order: {out_of_order}",
        ms(median_wait),
        ms(max_wait),
        max_wait as f64 / median_wait.max(1) as f64
    );
    println!(
        "one deployment (first step to last): median {:.0} ms, max {:.0} ms",
        ms(spans[spans.len() / 2]),
        ms(*spans.last().unwrap())
    );
    println!(
        "floor: mean {:.0} ms over {} apps; sum for {apps} apps {:.1} s; / {workers} workers = {:.1} s",
        floor_mean.as_secs_f64() * 1000.0,
        floors.len(),
        floor_sum.as_secs_f64(),
        ideal.as_secs_f64()
    );
    println!(
        "floor at {workers} at once: {parallel_n} apps in {:.1} s, so {apps} apps in {:.1} s",
        parallel_wall.as_secs_f64(),
        parallel_total.as_secs_f64()
    );
    println!(
        "total: {:.1} s from the first push to the last step finished; total / (floor sum / workers) = {:.2}x; total / floor at {workers} at once = {:.2}x",
        ms(total_us) / 1000.0,
        (total_us as f64 / 1e6) / ideal.as_secs_f64(),
        (total_us as f64 / 1e6) / parallel_total.as_secs_f64()
    );
    println!("pier by journal step over all deployments (median ms, max ms):");
    for (step, median, max) in &step_medians {
        println!("    {step:<10} {median:>8.1} {max:>8.1}");
    }
    assert!(failed.is_empty(), "every app is deployed");
    assert!(
        concurrent <= workers,
        "at most {workers} at once, saw {concurrent}"
    );
    env.cleanup().await;
}
