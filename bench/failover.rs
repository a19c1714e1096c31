//! How long Pier takes to work again after its database fails over (issue 28), against a
//! baseline measured in the same run: the same primary restarted in place.
//!
//! Each round starts a primary and a synchronous standby (`tests/support/pg_pair.rs`),
//! deploys v1, pushes v2 without a notification, SIGKILLs the primary's postmaster, and
//! posts signed deliveries of v2 every 10 ms. Then either the standby is promoted
//! (`failover`) or the primary started again on its own data (`restart`, replication
//! off). From the moment that server first takes a write (a probe every 5 ms, the same
//! clock for both) it measures:
//! - first 2xx: the first delivery Pier acknowledges;
//! - first claim: when a worker claimed the deployment that delivery queued (the
//!   deployment's `started_at`, Postgres' clock on this same machine).
//!
//! `cargo bench --bench failover` (needs what `scripts/test` sets up; 3 rounds of each, or
//! `BENCH_ROUNDS`). Prints each round, the medians and failover/restart; asserts nothing
//! about time.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Restart,
    Failover,
}

struct Round {
    first_2xx: Duration,
    first_claim: Duration,
}

/// One signed delivery of `digest` for the first app; its status, if any answer came.
async fn deliver(env: &TestEnv, digest: &str) -> Option<u16> {
    let body = serde_json::json!({
        "repository": env.image(), "tag": "main", "digest": digest,
        "id": format!("bench-{}", random_hex(16)),
    })
    .to_string();
    let sig = sign_hmac_sha256(&env.generic_secret, body.as_bytes());
    http_post(
        &env.hook_url("gen"),
        &[
            ("Content-Type", "application/json"),
            ("X-Pier-Signature", &sig),
        ],
        body,
    )
    .await
    .map(|(code, _)| code)
}

async fn round(mode: Mode) -> Round {
    let mut pair = PgPair::start().await;
    let env = TestEnv::builder()
        .on_pair(&pair)
        .without_notifications()
        .start()
        .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    assert!(matches!(deliver(&env, &v1).await, Some(202)));
    env.wait_app_version("v1", Duration::from_secs(90)).await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;

    pair.kill_primary().await;
    let sending = async {
        // Bounded: 3000 deliveries, 10 ms apart, about a minute at most.
        for _ in 0..3000 {
            if matches!(deliver(&env, &v2).await, Some(c) if (200..300).contains(&c)) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no delivery was acknowledged after the {mode:?}");
    };
    let server = match mode {
        Mode::Failover => pair.standby.url("postgres"),
        Mode::Restart => pair.primary.url("postgres"),
    };
    let recovering = async {
        // The gap a real failover has before anyone promotes: Pier sees only refusals.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The same clock for both: the first moment the server takes a write, seen by a
        // probe every 5 ms beside the command that brings it up.
        let writable = first_writable(&server);
        let bring_up = async {
            match mode {
                Mode::Failover => pair.promote_standby().await,
                Mode::Restart => pair.restart_primary().await,
            };
        };
        let (ready, ()) = tokio::join!(writable, bring_up);
        ready
    };
    let (acked, (ready, ready_wall)) = tokio::join!(sending, recovering);
    let mut env = env;
    env.db.repoint(&server).await;
    let app = env.app().to_owned();
    let started = wait_until(
        "the v2 deployment is claimed",
        Duration::from_secs(90),
        || async {
            env.deployment_rows(&app)
                .await
                .into_iter()
                .filter(|r| {
                    r.started_at
                        .is_some_and(|t| t > ready_wall - chrono::Duration::seconds(60))
                })
                .find_map(|r| (r.resolved_digest.as_deref() != Some(&v1)).then_some(r.started_at?))
        },
    )
    .await;
    env.wait_app_version("v2", Duration::from_secs(90)).await;
    env.cleanup().await;
    Round {
        first_2xx: acked.saturating_duration_since(ready),
        first_claim: (started - ready_wall).to_std().unwrap_or_default(),
    }
}

/// The first moment `server` commits a write (a temporary table's insert), probed every
/// 5 ms for at most a minute.
async fn first_writable(server: &str) -> (Instant, chrono::DateTime<chrono::Utc>) {
    use sqlx::Connection;
    for _ in 0..12_000 {
        if let Ok(Ok(mut conn)) = tokio::time::timeout(
            Duration::from_millis(500),
            sqlx::PgConnection::connect(server),
        )
        .await
        {
            let wrote =
                sqlx::raw_sql("CREATE TEMP TABLE probe (x int); INSERT INTO probe VALUES (1)")
                    .execute(&mut conn)
                    .await
                    .is_ok();
            let _ = conn.close().await;
            if wrote {
                return (Instant::now(), chrono::Utc::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{server} never took a write");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut results: Vec<(Mode, Round)> = Vec::new();
    for i in 0..rounds {
        // Interleaved, so that the machine's noise falls on both.
        for mode in [Mode::Restart, Mode::Failover] {
            let r = round(mode).await;
            println!(
                "round {i}: {mode:?}: first 2xx {:>8.1?} after the server accepts writes, first claim {:>8.1?}",
                r.first_2xx, r.first_claim
            );
            results.push((mode, r));
        }
    }
    let of = |mode: Mode, f: fn(&Round) -> Duration| {
        median(
            results
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    for (what, f) in [
        (
            "first 2xx",
            (|r: &Round| r.first_2xx) as fn(&Round) -> Duration,
        ),
        ("first claim", |r: &Round| r.first_claim),
    ] {
        let (restart, failover) = (of(Mode::Restart, f), of(Mode::Failover, f));
        println!(
            "median {what}: restart {restart:.1?}, failover {failover:.1?}, failover/restart {:.2}",
            failover.as_secs_f64() / restart.as_secs_f64().max(1e-3)
        );
    }
}
