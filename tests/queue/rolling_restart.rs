//! Two `pier serve` on one database, restarted one at a time (as an upgrade replaces each
//! in turn) while pushes arrive through a sender that tries the other when one does not
//! answer, as a load balancer does: every acknowledged delivery is stored, every push
//! queues exactly one deployment, none runs twice, and the last push ends up running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);
const PUSHES: usize = 6;

/// Sends a signed delivery to the first of `piers` that stores it (2xx), trying each in
/// turn, again and again, as a load balancer in front of both would; its delivery id.
async fn deliver(env: &TestEnv, piers: &[String; 2], first: usize, body: &str) -> String {
    let sig = sign_hmac_sha256(&env.generic_secret, body.as_bytes());
    let headers = [
        ("Content-Type", "application/json"),
        ("X-Pier-Signature", sig.as_str()),
    ];
    let mut turn = first;
    wait_until("a Pier stores the delivery", DEPLOY, || {
        let url = format!("{}/hooks/gen", piers[turn % 2]);
        turn += 1;
        async move {
            match http_post(&url, &headers, body.as_bytes().to_vec()).await {
                Some((200..=299, answer)) => {
                    let v: serde_json::Value = serde_json::from_str(&answer).ok()?;
                    Some(v["delivery"]["id"].as_str()?.to_owned())
                }
                _ => None,
            }
        }
    })
    .await
}

/// The deployment a push queued has left the queue (started, or superseded by a newer one).
async fn picked_up(env: &TestEnv, digest: &str) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM deployments WHERE claimed_digest = $1 AND state <> 'queued')",
    )
    .bind(digest)
    .fetch_one(&env.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn restarting_two_piers_one_at_a_time_under_pushes_loses_no_delivery_and_runs_nothing_twice()
{
    let mut env = TestEnv::builder()
        .without_notifications()
        .lease("30s")
        .start()
        .await;
    let app = env.app().to_owned();
    let mut a = env.pier.take().expect("pier started");
    let mut b = env.start_another_pier().await;
    let piers = [a.url(""), b.url("")];
    let sent = AtomicUsize::new(0);
    let since = chrono::Utc::now().timestamp() - 1;

    let pushes = async {
        let mut acknowledged = Vec::new();
        for i in 1..=PUSHES {
            // Each new version takes a second to become healthy: restarts land mid-deployment.
            let digest = env
                .push(&TestImage::slow_start(&format!("v{i}"), 1), "main")
                .await;
            let body = format!(
                r#"{{"repository": "{}", "tag": "main", "digest": "{digest}", "id": "push-{i}"}}"#,
                env.repo()
            );
            acknowledged.push((deliver(&env, &piers, i, &body).await, digest.clone()));
            sent.store(i, Ordering::SeqCst);
            wait_until(&format!("push {i} is picked up"), DEPLOY, || async {
                picked_up(&env, &digest).await.then_some(())
            })
            .await;
        }
        acknowledged
    };
    let restarts = async {
        for (pier, after) in [(&mut a, 2), (&mut b, 4)] {
            wait_until(&format!("{after} pushes sent"), DEPLOY, || async {
                (sent.load(Ordering::SeqCst) >= after).then_some(())
            })
            .await;
            // systemd's stop: SIGTERM, then the next binary starts on the same config.
            let code = pier.terminate(Duration::from_secs(60)).await;
            assert_eq!(code, Some(0), "a graceful stop: {}", tail(&pier.log(), 30));
            pier.restart().await;
        }
    };
    let (acknowledged, ()) = tokio::join!(pushes, restarts);

    let last = &acknowledged.last().unwrap().1;
    wait_until(
        "the last push runs, alone, and nothing is left to do",
        DEPLOY,
        || async {
            let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deployments WHERE app = $1 AND state IN ('queued', 'running')",
        )
        .bind(&app)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
            (busy == 0 && env.running_digests_of(&app).await == [last.clone()]).then_some(())
        },
    )
    .await;

    let ids: Vec<uuid::Uuid> = acknowledged
        .iter()
        .map(|(id, _)| id.parse().unwrap())
        .collect();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(
        stored, PUSHES as i64,
        "every acknowledged delivery is stored"
    );
    for (i, (_, digest)) in acknowledged.iter().enumerate() {
        let states: Vec<String> = sqlx::query_scalar(
            "SELECT state FROM deployments WHERE app = $1 AND claimed_digest = $2",
        )
        .bind(&app)
        .bind(digest)
        .fetch_all(&env.db.pool)
        .await
        .unwrap();
        assert!(
            states == ["succeeded"] || states == ["superseded"],
            "push {}: one deployment, ended well: {states:?}",
            i + 1
        );
    }
    // A deployment that one Pier released at its stop is resumed by the other from the
    // journal: the engine saw one container created per deployment, never a second.
    let created = container_creates(
        &format!("pier.app={app}"),
        since,
        "{{index .Actor.Attributes \"pier.deployment\"}}",
    );
    let mut per_deployment: std::collections::BTreeMap<&str, usize> = Default::default();
    for id in &created {
        *per_deployment.entry(id.as_str()).or_default() += 1;
    }
    assert!(per_deployment.len() >= 2, "containers created: {created:?}");
    assert!(
        per_deployment.values().all(|n| *n == 1),
        "a deployment created two containers: {per_deployment:?}"
    );
    let resumed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deployments WHERE app = $1 AND attempt > 1")
            .bind(&app)
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    eprintln!(
        "{PUSHES} pushes, 2 restarts: {} deployments created containers, {resumed} resumed by another Pier",
        per_deployment.len()
    );
    a.kill();
    b.kill();
    env.cleanup().await;
}
