//! Pickup: from the moment the webhook's answer arrives to the moment the worker's first
//! journal step starts (its `started_at`, the same machine's clock), idle and while a load
//! generator sends deliveries at concurrency 16.

use std::sync::Arc;
use std::time::Duration;

use super::support::*;
use super::{body, drive};

const ROUNDS: usize = 20;

async fn wait_quiet(env: &TestEnv) {
    for _ in 0..1200 {
        let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deployments WHERE state IN ('queued', 'running')",
        )
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
        if busy == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the queue never drained");
}

async fn one(env: &TestEnv, hook: &str, secret: &str, repo: &str, n: u64, nonce: u64) -> f64 {
    let b = body(repo, n, nonce);
    let sig = sign_hmac_sha256(secret, &b);
    let (status, text) = http_post(
        hook,
        &[
            ("Content-Type", "application/json"),
            ("X-Pier-Signature", &sig),
        ],
        b,
    )
    .await
    .expect("pier answers");
    let answered = chrono::Utc::now();
    assert_eq!(status, 202, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let id: uuid::Uuid = json["deployments"][0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..5000 {
        let started: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT min(started_at) FROM deployment_steps WHERE deployment_id = $1",
        )
        .bind(id)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
        if let Some(s) = started {
            return (s - answered).num_microseconds().unwrap_or(0) as f64 / 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("deployment {id} never started a step");
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn run(env: &TestEnv, hook: &str, secret: &str, nobody: &str, nonce: u64) {
    println!("\n| pickup (answer → first step) | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: |");
    for loaded in [false, true] {
        wait_quiet(env).await;
        let load = loaded.then(|| {
            let (hook, secret, nobody) = (hook.to_owned(), secret.to_owned(), nobody.to_owned());
            tokio::spawn(async move {
                let make = Arc::new(move |n: u64| {
                    let b = body(&nobody, n, nonce ^ 0x10ad);
                    let sig = sign_hmac_sha256(&secret, &b);
                    (hook.clone(), b, sig)
                });
                drive(16, Duration::from_secs(3600), &[200], make).await
            })
        });
        let mut took = Vec::new();
        for i in 0..ROUNDS {
            let app = &env.apps[1 + i % (env.apps.len() - 1)];
            let repo = format!("{}/{}", env.registry_host(), app.repo);
            took.push(
                one(
                    env,
                    hook,
                    secret,
                    &repo,
                    i as u64,
                    nonce ^ (0x9000 + loaded as u64),
                )
                .await,
            );
            wait_quiet(env).await;
        }
        if let Some(l) = load {
            l.abort();
        }
        let max = took.iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "| {} | {:.1} | {:.1} | {:.1} |",
            if loaded {
                "under ingest load (16 senders)"
            } else {
                "idle"
            },
            pct(&mut took, 0.5),
            pct(&mut took, 0.99),
            max
        );
    }
}
