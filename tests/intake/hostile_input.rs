//! Authentic but odd payloads, ambiguous credentials, floods of forgeries and requests
//! dropped mid-flight: each gets a clear 4xx (never a 500), stores nothing it should not,
//! writes a bounded number of log lines, and leaves the database clean.

use std::time::Duration;

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DISTRIBUTION: &str = "application/vnd.docker.distribution.events.v1+json";

async fn deliveries(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

/// Sends `head` (and `body`) on a fresh connection; the status line's code.
async fn raw(env: &TestEnv, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(format!("127.0.0.1:{}", env.pier_port))
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

fn envelope(events: usize) -> Vec<u8> {
    let one = |i: usize| {
        serde_json::json!({
            "id": format!("event-{i}"),
            "action": "push",
            "target": {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": format!("sha256:{}", "ab".repeat(32)),
                "repository": "demo/nobody",
                "tag": "main"
            },
            "request": { "host": "127.0.0.1:1" }
        })
    };
    serde_json::to_vec(&serde_json::json!({ "events": (0..events).map(one).collect::<Vec<_>>() }))
        .unwrap()
}

#[tokio::test]
async fn odd_but_authentic_payloads_get_a_4xx_with_a_reason_and_never_a_500() {
    let env = TestEnv::builder().without_notifications().start().await;
    let bearer = format!("Bearer {}", env.distribution_token);

    // A NUL byte in a field: Postgres could not store it, so it is refused with a reason.
    let (status, answer) = env
        .post_generic(br#"{"repository": "demo/x", "tag": "ma\u0000in", "id": "nul-1"}"#)
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("NUL"), "{answer}");
    assert_eq!(deliveries(&env).await, 0);

    // Hundreds of events in one envelope: 413, with the reason.
    let (status, answer) = env
        .post_hook(
            "local",
            &[("Content-Type", DISTRIBUTION), ("Authorization", &bearer)],
            &envelope(300),
        )
        .await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("too many events"), "{answer}");
    assert_eq!(deliveries(&env).await, 0);
    // A hundred are fine, and their joined ids (far longer than an index entry may be)
    // still deduplicate a retry.
    for expect_new in [true, false] {
        let (status, answer) = env
            .post_hook(
                "local",
                &[("Content-Type", DISTRIBUTION), ("Authorization", &bearer)],
                &envelope(100),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer.contains("\"duplicate\":true"),
            !expect_new,
            "{answer}"
        );
    }
    // An event id longer than the dedupe index can hold is hashed, not refused.
    let long_id = "x".repeat(5000);
    for _ in 0..2 {
        let body = format!(r#"{{"repository": "demo/x", "tag": "main", "id": "{long_id}"}}"#);
        let (status, answer) = env.post_generic(body.as_bytes()).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(deliveries(&env).await, 2);
    let log = env.pier().log();
    assert!(
        !log.contains(" 500 "),
        "no 500 in the log: {}",
        tail(&log, 20)
    );
    env.cleanup().await;
}

#[tokio::test]
async fn credentials_are_checked_from_the_head_and_must_not_be_ambiguous() {
    let env = TestEnv::builder().without_notifications().start().await;
    let body = std::fs::read("tests/fixtures/distribution_push_v1.json").unwrap();

    // Two Authorization headers, one of them right: refused, nothing stored.
    let head = format!(
        "POST /hooks/local HTTP/1.1\r\nHost: pier\r\nContent-Type: {DISTRIBUTION}\r\n\
         Authorization: Bearer wrong\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        env.distribution_token,
        body.len()
    );
    let (status, answer) = raw(&env, &head, &body).await;
    assert_eq!(status, 401, "{answer}");

    // A wrong token is answered before the (announced, never sent) body is read.
    let head = format!(
        "POST /hooks/local HTTP/1.1\r\nHost: pier\r\nContent-Type: {DISTRIBUTION}\r\n\
         Authorization: Bearer wrong\r\nContent-Length: 500000\r\n\r\n"
    );
    let (status, answer) = raw(&env, &head, b"{").await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(deliveries(&env).await, 0);
    env.cleanup().await;
}

/// A forged generic delivery, with `extra` headers.
async fn forge(env: &TestEnv, i: usize, extra: &[(&str, &str)]) -> u16 {
    let body = format!(r#"{{"repository": "demo/x", "tag": "main", "id": "forged-{i}"}}"#);
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("X-Pier-Signature", "sha256=00"),
    ];
    headers.extend_from_slice(extra);
    env.post_hook("gen", &headers, body.as_bytes()).await.0
}

/// An authentic generic delivery for a repository no app follows: 200, stored.
async fn authentic(env: &TestEnv, id: &str, extra: &[(&str, &str)]) -> (u16, String) {
    let body = format!(r#"{{"repository": "demo/nobody", "tag": "main", "id": "{id}"}}"#);
    let sig = sign_hmac_sha256(&env.generic_secret, body.as_bytes());
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("X-Pier-Signature", sig.as_str()),
    ];
    headers.extend_from_slice(extra);
    env.post_hook("gen", &headers, body.as_bytes()).await
}

#[tokio::test]
async fn an_authentic_delivery_is_accepted_from_an_address_braked_by_forgeries() {
    let env = TestEnv::builder().without_notifications().start().await;
    for i in 0..30 {
        forge(&env, i, &[]).await;
    }
    assert_eq!(forge(&env, 30, &[]).await, 429, "the address is braked");
    let (status, answer) = authentic(&env, "honest-1", &[]).await;
    assert_eq!(status, 200, "a signed delivery is never braked: {answer}");
    assert_eq!(deliveries(&env).await, 1, "and it is recorded");
    // The brake still holds for what fails.
    assert_eq!(forge(&env, 31, &[]).await, 429);
    env.cleanup().await;
}

#[tokio::test]
async fn a_forwarded_for_header_names_the_client_only_from_a_trusted_proxy() {
    // Not trusted (the default): a forger cannot escape the brake by naming other clients,
    // nor brake someone else by naming them.
    let env = TestEnv::builder().without_notifications().start().await;
    for i in 0..20 {
        let xff = format!("198.51.100.{i}");
        assert_eq!(forge(&env, i, &[("X-Forwarded-For", &xff)]).await, 401);
    }
    let xff = [("X-Forwarded-For", "198.51.100.200")];
    assert_eq!(forge(&env, 20, &xff).await, 429, "braked as 127.0.0.1");
    env.cleanup().await;

    // Trusted: the brake is per client behind the proxy.
    let env = TestEnv::builder()
        .without_notifications()
        .server_toml("trusted_proxies = [\"127.0.0.0/8\"]")
        .start()
        .await;
    let forger = [("X-Forwarded-For", "6.6.6.6, 198.51.100.7")];
    for i in 0..20 {
        assert_eq!(forge(&env, i, &forger).await, 401, "attempt {i}");
    }
    assert_eq!(forge(&env, 20, &forger).await, 429, "the forger is braked");
    let other = [("X-Forwarded-For", "198.51.100.8")];
    assert_eq!(forge(&env, 21, &other).await, 401, "another client is not");
    let log = env.pier().log();
    assert!(
        log.contains("198.51.100.7"),
        "the log names the client:\n{log}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_flood_of_forgeries_is_braked_counted_and_logged_a_few_lines_at_a_time() {
    let env = TestEnv::builder().without_notifications().start().await;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..300 {
        let body = format!(r#"{{"repository": "demo/x", "tag": "main", "id": "forged-{i}"}}"#);
        let (status, _) = env
            .post_hook(
                "gen",
                &[
                    ("Content-Type", "application/json"),
                    ("X-Pier-Signature", "sha256=00"),
                ],
                body.as_bytes(),
            )
            .await;
        *statuses.entry(status).or_default() += 1;
    }
    eprintln!("answers to 300 forgeries: {statuses:?}");
    assert_eq!(statuses.get(&401), Some(&20), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&280), "then braked: {statuses:?}");
    assert_eq!(deliveries(&env).await, 0);

    let (_, metrics) = http_get(&env.pier_url("/metrics")).await.unwrap();
    let counted = |result: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("pier_webhooks_total")
                    && l.contains("source=\"gen\"")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(counted("unauthenticated"), 20.0, "{metrics}");
    assert_eq!(counted("throttled"), 280.0, "{metrics}");
    let lines = env
        .pier()
        .log()
        .lines()
        .filter(|l| l.contains("webhook rejected") || l.contains("webhook not accepted"))
        .count();
    assert!(lines <= 10, "{lines} log lines for 300 forgeries");
    env.cleanup().await;
}

#[tokio::test]
async fn a_forged_newline_in_a_path_never_reaches_the_log_raw() {
    let env = TestEnv::builder().without_notifications().start().await;
    let forged = "/hooks/gen%0a2026-01-01T00:00:00.000000Z%20ERROR%20forged-line";
    let (status, _) = raw(
        &env,
        &format!(
            "POST {forged} HTTP/1.1\r\nHost: pier\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\n\r\n"
        ),
        b"{}",
    )
    .await;
    assert_eq!(status, 404);
    let log = env.pier().log();
    assert!(
        !log.contains("forged-line"),
        "the path is never logged: {}",
        tail(&log, 10)
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("ERROR") && l.contains("2026-01-01")),
        "{}",
        tail(&log, 10)
    );
    env.cleanup().await;
}

#[tokio::test]
async fn requests_dropped_mid_flight_leave_no_open_transaction_behind() {
    let env = TestEnv::builder().without_notifications().start().await;
    // Three waves of 300 authentic deliveries whose clients give up within 1 to 15 ms,
    // at every point of intake's transaction.
    let client = reqwest::Client::new();
    for wave in 0..3u64 {
        let mut dropped = tokio::task::JoinSet::new();
        for i in 0..300u64 {
            let body =
                format!(r#"{{"repository": "demo/x", "tag": "main", "id": "dropped-{wave}-{i}"}}"#);
            let signature = sign_hmac_sha256(&env.generic_secret, body.as_bytes());
            let req = client
                .post(env.hook_url("gen"))
                .header("Content-Type", "application/json")
                .header("X-Pier-Signature", signature)
                .body(body)
                .timeout(Duration::from_millis(1 + (i + wave) % 15));
            dropped.spawn(async move { req.send().await.is_ok() });
        }
        while dropped.join_next().await.is_some() {}
    }

    // No pooled connection was left inside a transaction, and nothing holds a lock.
    let db = env.db.name.clone();
    wait_until(
        "no session idle in a transaction",
        Duration::from_secs(10),
        || {
            let pool = env.db.pool.clone();
            let db = db.clone();
            async move {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND state LIKE 'idle in transaction%'",
                )
                .bind(&db)
                .fetch_one(&pool)
                .await
                .unwrap();
                (open == 0).then_some(())
            }
        },
    )
    .await;
    // Per-app enqueue locks are transaction-scoped 32-bit keys (high half 0 or all ones);
    // the only others are the processes' liveness locks, held for as long as they live.
    let locks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
         WHERE d.datname = $1 AND l.locktype = 'advisory'
           AND l.classid::bigint IN (0, 4294967295)",
    )
    .bind(&db)
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(
        locks, 0,
        "no advisory lock left held but the liveness locks"
    );

    // The workers and intake still work, on the same pool.
    let (status, answer) = env
        .post_generic(br#"{"repository": "demo/x", "tag": "main", "id": "after"}"#)
        .await;
    assert_eq!(status, 200, "{answer}");
    let log = env.pier().log();
    for bad in [
        "already a transaction in progress",
        "25P02",
        "current transaction is aborted",
    ] {
        assert!(!log.contains(bad), "{bad}: {}", tail(&log, 20));
    }
    env.cleanup().await;
}
