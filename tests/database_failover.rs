//! Pier survives its database's failover: a primary and its synchronous
//! standby, both real Postgres clusters of this test's own; the primary's postmaster is
//! SIGKILLed and the standby promoted while pushes arrive, a deployment runs, and `pier
//! proxy` serves. Pier is given both hosts in one libpq-style URL.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::*;

const DEPLOY: Duration = Duration::from_secs(90);

/// One signed delivery sent to the generic source and what Pier answered (`None`: no
/// answer at all).
#[derive(Debug, Clone)]
struct Sent {
    at: Instant,
    took: Duration,
    status: Option<u16>,
    /// The delivery Pier said it stored (2xx answers only).
    delivery: Option<String>,
}

/// Waits until `seen` holds `n` answers with `status` sent after `since`.
async fn wait_answers(
    seen: &std::sync::Mutex<Vec<Sent>>,
    what: &str,
    since: Instant,
    n: usize,
    ok: impl Fn(Option<u16>) -> bool,
) {
    wait_until(what, DEPLOY, || {
        let count = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.at >= since && ok(s.status))
            .count();
        async move { (count >= n).then_some(()) }
    })
    .await
}

fn is_2xx(s: Option<u16>) -> bool {
    s.is_some_and(|c| (200..300).contains(&c))
}

/// Waits until `app` answers `GET /version` on its published port with `version`.
async fn wait_serving(app: &AppSpec, version: &str) {
    let url = format!("http://{}/version", app.publish());
    wait_until(&format!("{} serves {version}", app.name), DEPLOY, || {
        let url = url.clone();
        async move { matches!(http_get(&url).await, Some((200, b)) if b == version).then_some(()) }
    })
    .await
}

#[tokio::test]
async fn pushes_through_a_failover_get_503_in_the_gap_and_no_acknowledged_delivery_is_lost() {
    let mut pair = PgPair::start().await;
    let mut env = TestEnv::builder()
        .on_pair(&pair)
        .add_app(AppSpec::new("api"))
        .add_app(AppSpec::new("job"))
        .start()
        .await;
    let (web, api, job) = (
        env.apps[0].clone(),
        env.apps[1].clone(),
        env.apps[2].clone(),
    );
    env.push(&TestImage::healthy("v1"), "main").await;
    wait_serving(&web, "v1").await;

    // Signed deliveries without pause, and real pushes (the registry's notifications)
    // before, during and after the gap: one push per app, so each push's digest must end
    // up running, none superseded.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Sent>::new()));
    // Answers land in `seen` as they come, so the scenario can wait on them.
    let stream = {
        let (stop, seen, env) = (stop.clone(), seen.clone(), &env);
        async move {
            // Bounded: a few thousand at most in the time the scenario may take.
            for _ in 0..20_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let sent = send_one(env).await;
                seen.lock().unwrap().push(sent);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let scenario = async {
        let start = Instant::now();
        wait_answers(&seen, "deliveries are acknowledged", start, 5, is_2xx).await;
        let api_v1 = env
            .registry()
            .push(&api.repo, "main", &TestImage::healthy("v1"))
            .await;
        pair.kill_primary().await;
        let killed = Instant::now();
        // Pushed while no server accepts writes: the registry's notification gets 503s.
        let job_v1 = env
            .registry()
            .push(&job.repo, "main", &TestImage::healthy("v1"))
            .await;
        wait_answers(&seen, "a delivery is refused with 503", killed, 3, |s| {
            s == Some(503)
        })
        .await;
        let promoted = pair.promote_standby().await;
        let web_v2 = env.push(&TestImage::healthy("v2"), "main").await;
        wait_answers(
            &seen,
            "deliveries are acknowledged again",
            promoted,
            20,
            is_2xx,
        )
        .await;
        stop.store(true, Ordering::SeqCst);
        (
            killed,
            promoted,
            [(api, api_v1), (job, job_v1), (web, web_v2)],
        )
    };
    let ((), (killed, promoted, pushes)) = tokio::join!(stream, scenario);
    let sent = seen.lock().unwrap().clone();

    // Every answer was a 2xx or a 503: none was lost on the way, none was a 500.
    let odd: Vec<&Sent> = sent
        .iter()
        .filter(|s| !(is_2xx(s.status) || s.status == Some(503)))
        .collect();
    assert!(odd.is_empty(), "answers other than 2xx and 503: {odd:?}");
    let refused = sent.iter().filter(|s| s.status == Some(503)).count();
    let acked: BTreeSet<String> = sent.iter().filter_map(|s| s.delivery.clone()).collect();
    assert_eq!(
        acked.len(),
        sent.iter().filter(|s| is_2xx(s.status)).count(),
        "every 2xx names its own delivery"
    );
    let mut took: Vec<Duration> = sent.iter().map(|s| s.took).collect();
    took.sort();
    eprintln!(
        "{} deliveries: {} acknowledged, {refused} refused with 503 (median answer {:?}, slowest {:?}); promotion asked {:?} after the kill",
        sent.len(),
        acked.len(),
        took[took.len() / 2],
        took[took.len() - 1],
        promoted - killed
    );

    // What the old primary acknowledged is on the new one: not one delivery is missing.
    env.db.repoint(&pair.standby.url("postgres")).await;
    let ids: Vec<uuid::Uuid> = acked.iter().map(|s| s.parse().unwrap()).collect();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(
        stored as usize,
        ids.len(),
        "acknowledged deliveries missing"
    );

    // Every push's digest ends up running, deployed once (never resumed by another run).
    for (app, digest) in &pushes {
        let rows = wait_until(
            &format!("{} deployed {digest}", app.name),
            DEPLOY,
            || async {
                let rows = env.deployment_rows(&app.name).await;
                let settled = rows
                    .iter()
                    .all(|r| r.state != "queued" && r.state != "running");
                let deployed = rows.iter().any(|r| {
                    r.state == "succeeded" && r.resolved_digest.as_deref() == Some(digest)
                });
                (settled && deployed).then_some(rows)
            },
        )
        .await;
        assert!(
            rows.iter().all(|r| r.attempt == 1),
            "{}: {rows:?}",
            app.name
        );
        assert_eq!(
            env.running_digests_of(&app.name).await,
            vec![digest.clone()]
        );
        let version = if app.name == env.app() { "v2" } else { "v1" };
        wait_serving(app, version).await;
    }
    env.cleanup().await;
}

/// `/readyz` means "a delivery would be stored now". With the synchronous standby gone no
/// commit can finish while reads still answer: readiness says so, with the reason, and a
/// webhook gets its 503 in seconds rather than after the pool's patience; with the standby
/// back, both recover.
#[tokio::test]
async fn readiness_fails_while_no_write_can_commit_and_webhooks_get_a_quick_503() {
    let pair = PgPair::start().await;
    let env = TestEnv::builder().on_pair(&pair).start().await;
    let readyz =
        || async { http_get_within(&env.pier_url("/readyz"), Duration::from_secs(10)).await };
    wait_until("Pier is ready", DEPLOY, || async {
        matches!(readyz().await, Some((200, _))).then_some(())
    })
    .await;
    assert!(is_2xx(send_one(&env).await.status));

    pair.stop_standby();
    let body = wait_until("readiness turns", DEPLOY, || async {
        match readyz().await {
            Some((503, body)) => Some(body),
            _ => None,
        }
    })
    .await;
    assert!(
        body.contains("database: unavailable: a write did not commit within 2s"),
        "{body}"
    );
    let refused = send_one(&env).await;
    assert_eq!(refused.status, Some(503), "{refused:?}");
    // Stored within 4 s or refused: the registries' own timeouts are 3 to 5 s. Before,
    // the answer came after the statement's 10 s deadline; the bound leaves a loaded
    // machine 5 s of slack and stays below those 10 s.
    assert!(
        refused.took < Duration::from_secs(9),
        "the 503 took {:?}",
        refused.took
    );

    pair.start_standby();
    wait_until("Pier is ready again", DEPLOY, || async {
        matches!(readyz().await, Some((200, _))).then_some(())
    })
    .await;
    assert!(is_2xx(send_one(&env).await.status));
}

/// One signed delivery of a tag no app follows: stored with its verdict (and answered 200
/// once stored), deploying nothing, so that the pushes alone decide what runs.
async fn send_one(env: &TestEnv) -> Sent {
    let body = serde_json::json!({
        "repository": env.image(), "tag": "unfollowed",
        "id": format!("failover-{}", random_hex(16)),
    })
    .to_string();
    let sig = sign_hmac_sha256(&env.generic_secret, body.as_bytes());
    let at = Instant::now();
    let answer = http_post(
        &env.hook_url("gen"),
        &[
            ("Content-Type", "application/json"),
            ("X-Pier-Signature", &sig),
        ],
        body,
    )
    .await;
    let (status, delivery) = match answer {
        Some((code, text)) if (200..300).contains(&code) => {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            (Some(code), v["delivery"]["id"].as_str().map(str::to_owned))
        }
        Some((code, _)) => (Some(code), None),
        None => (None, None),
    };
    Sent {
        at,
        took: at.elapsed(),
        status,
        delivery,
    }
}

/// Containers the engine created for `deployment` since `since` (unix seconds): counted
/// from the engine's own event log, so a container created and removed again still counts.
fn creates_of(deployment: &str, since: i64) -> Vec<String> {
    container_creates(
        &format!("pier.deployment={deployment}"),
        since,
        "{{.Actor.ID}}",
    )
}

#[tokio::test]
async fn a_deployment_in_flight_during_a_failover_finishes_once_on_the_same_container() {
    let mut pair = PgPair::start().await;
    // A long lease: only a wrong reading of the missing liveness locks on the promoted
    // standby could make another worker take the deployment over within this test.
    let mut env = TestEnv::builder().on_pair(&pair).lease("60s").start().await;
    let other = env.start_another_pier().await;
    let app = env.app().to_owned();
    let since = chrono::Utc::now().timestamp() - 1;
    let digest = env.push(&TestImage::slow_start("v1", 8), "main").await;
    let running = wait_until("v1 is in its health step", DEPLOY, || async {
        let r = env
            .deployment_rows(&app)
            .await
            .into_iter()
            .find(|r| r.state == "running")?;
        let health: Option<String> = sqlx::query_scalar(
            "SELECT state FROM deployment_steps WHERE deployment_id = $1::uuid AND step = 'health'",
        )
        .bind(&r.id)
        .fetch_optional(&env.db.pool)
        .await
        .ok()?;
        health.map(|_| r)
    })
    .await;
    let before: Vec<String> = env
        .engine
        .containers_of_app(&app)
        .await
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    assert_eq!(before.len(), 1, "{before:?}");
    // A browser on the deployment's page, and an API client waiting for its end, both
    // from before the failover until after it.
    let page = tokio::spawn({
        let url = env.pier_url(&format!("/deployments/{}/events", running.id));
        async move { follow_until_final(&url, DEPLOY).await }
    });
    let waiter = tokio::spawn({
        let url = env.pier_url(&format!("/api/deployments/{}?wait=110s", running.id));
        let token = env.admin_token.clone();
        async move {
            let resp = reqwest::Client::new()
                .get(&url)
                .bearer_auth(token)
                .timeout(Duration::from_secs(130))
                .send()
                .await
                .expect("the long poll answers");
            let status = resp.status().as_u16();
            (
                status,
                resp.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    });
    // Both are listening (their LISTEN is the last statement of its connection) before
    // the primary goes.
    wait_until("the page and the waiter listen", DEPLOY, || async {
        let listening: Vec<String> =
            sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")
                .fetch_all(&env.db.pool)
                .await
                .ok()?;
        let on = |c: &str| listening.iter().any(|q| q.contains(c));
        (on("pier_live") && on("pier_queue")).then_some(())
    })
    .await;

    pair.kill_primary().await;
    // Both processes notice, and neither can write anywhere, before the promotion.
    for p in [env.pier(), &other] {
        p.wait_for_log("queue listener lost its connection", DEPLOY)
            .await;
    }
    pair.promote_standby().await;
    env.db.repoint(&pair.standby.url("postgres")).await;

    let done = env.deployment_final(&running.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["resolved_digest"], digest.as_str());
    assert_eq!(done["attempt"], 1, "taken over by another run: {done:#}");
    let after: Vec<String> = env
        .engine
        .containers_of_app(&app)
        .await
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    assert_eq!(after, before, "the same container serves");
    let (status, waited) = waiter.await.unwrap();
    assert_eq!(status, 200, "{waited:#}");
    assert_eq!(
        waited["state"], "succeeded",
        "the long poll followed the failover: {waited:#}"
    );
    let (events, opened) = page.await.unwrap();
    assert!(
        events.last().unwrap().data.contains("succeeded"),
        "the page's last frame shows the end ({opened} streams): {:?}",
        events.last()
    );
    assert_eq!(
        creates_of(&running.id, since),
        before,
        "one create, of that container"
    );
    // Each process re-took its own liveness lock on the new primary, and said so there.
    let relocked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pier_holders
         WHERE instance = pg_postmaster_start_time() AND pier_holder_alive(key)",
    )
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(relocked, 2, "both processes hold their liveness lock again");
    drop(other);
    env.cleanup().await;
}

#[tokio::test]
async fn pier_proxy_serves_through_a_failover_without_a_failed_request() {
    let mut pair = PgPair::start().await;
    let env = TestEnv::builder()
        .on_pair(&pair)
        .lease("10s")
        .health_timeout(Duration::from_secs(10))
        .app(|a| a.blue_green("soak = \"1s\""))
        .start()
        .await;
    let proxy = env.start_proxy().await;
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;

    let load = Load::start(&env.app_url("/version"), 200_000, Duration::from_secs(180));
    pair.kill_primary().await;
    proxy.wait_for_log("proxy lost the database", DEPLOY).await;
    pair.promote_standby().await;
    // The route feed follows the new primary: a version deployed after the promotion is
    // what the proxy then serves.
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let answers = load.finish().await;

    let failed = failures(&answers);
    assert!(answers.len() > 50, "the load ran: {}", answers.len());
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(10)]
    );
    eprintln!(
        "{} requests through the failover, none failed",
        answers.len()
    );
    // And the deployment after the promotion went all the way: v1 retired.
    wait_until("only v2 runs", DEPLOY, || async {
        (env.running_digests_of(env.app()).await == [v2.clone()]).then_some(())
    })
    .await;
    drop(proxy);
    env.cleanup().await;
}
