//! A batch's pushes for one app are queued by one call (`pier_enqueue_many`, migration
//! 0028): each push still gets its deployment, linked to its delivery, the newest queued and
//! every older one superseded by the next, exactly as if the pushes had come one by one.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;
use pier::store::{
    DeliveryOutcome, DeploymentState, Enqueued, NewDelivery, NewDeployment, Store, Trigger,
};
use uuid::Uuid;

fn push(app: &str, digest: &str) -> NewDeployment {
    NewDeployment {
        app: app.to_owned(),
        trigger: Trigger::Webhook,
        delivery_id: None,
        image: format!("127.0.0.1:5000/demo/{app}"),
        requested_tag: Some("main".to_owned()),
        claimed_digest: Some(format!("sha256:{digest:0>64}")),
        pinned: false,
    }
}

fn delivery(key: &str) -> NewDelivery {
    NewDelivery {
        source: "local".into(),
        event_key: Some(key.to_owned()),
        events: serde_json::json!([]),
        reason: "deploys".into(),
    }
}

/// Rows of `deployments` the database has updated, once the inserts of `inserted`
/// deployments are in the statistics (a backend reports its counters together).
async fn deployment_updates(db: &TestDb, inserted: i64) -> i64 {
    wait_until(
        "the statistics show the inserts",
        Duration::from_secs(20),
        || async {
            let (ins, upd): (i64, i64) = sqlx::query_as(
                "SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'deployments'",
            )
            .fetch_one(&db.pool)
            .await
            .ok()?;
            (ins >= inserted).then_some(upd)
        },
    )
    .await
}

#[tokio::test]
async fn a_batch_of_pushes_for_one_app_writes_each_deployment_once_in_its_final_state() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    // Forty pushes for one app at once: they go in a few batches. Queued one by one, every
    // push but the first updated the deployment the push before it had just queued.
    const N: usize = 40;
    let outcomes = futures_util::future::join_all((0..N).map(|n| {
        store.record_delivery(
            delivery(&format!("e-{n}")),
            None,
            vec![push("a", &n.to_string())],
        )
    }))
    .await;
    let mut queued = Vec::new();
    for o in outcomes {
        match o.expect("recorded") {
            DeliveryOutcome::Recorded {
                delivery_id,
                deployments,
                ..
            } => match &deployments[..] {
                [Enqueued::Queued { id, superseded, .. }] => {
                    queued.push((delivery_id, *id, superseded.clone()))
                }
                other => panic!("expected one queued deployment, got {other:?}"),
            },
            other => panic!("expected a recorded delivery, got {other:?}"),
        }
    }
    let batches: i64 = sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deliveries")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        batches < N as i64 / 2,
        "{N} pushes went in {batches} batches"
    );
    let updated = deployment_updates(&db, N as i64).await;
    assert!(
        updated < batches,
        "{N} pushes in {batches} batches updated {updated} deployment rows: at most the one \
         queued before each batch (not the first) may be, the rest are written once"
    );
    // One deployment per push, each linked to its delivery; the newest queued, each older
    // one superseded by the next, in arrival order.
    let rows: HashMap<Uuid, (Option<Uuid>, DeploymentState, Option<Uuid>)> =
        sqlx::query_as::<_, (Uuid, Option<Uuid>, DeploymentState, Option<Uuid>)>(
            "SELECT id, delivery_id, state, superseded_by FROM deployments WHERE app = 'a'",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, delivery, state, by)| (id, (delivery, state, by)))
        .collect();
    assert_eq!(rows.len(), N);
    for (n, (delivery_id, id, superseded)) in queued.iter().enumerate() {
        let (linked, state, by) = rows[id];
        assert_eq!(
            linked,
            Some(*delivery_id),
            "push {n} is linked to its delivery"
        );
        if n + 1 < N {
            assert_eq!(state, DeploymentState::Superseded, "push {n}");
            assert_eq!(
                by,
                Some(queued[n + 1].1),
                "push {n} is superseded by the next"
            );
        } else {
            assert_eq!(
                state,
                DeploymentState::Queued,
                "the newest push stays queued"
            );
        }
        let before: Vec<Uuid> = queued[..n].last().map(|p| p.1).into_iter().collect();
        assert_eq!(superseded, &before, "push {n} answers what it superseded");
    }
    let mut db = db;
    db.cleanup().await;
}

/// One delivery per element of `pushes` (an event key and a digest, both short names),
/// recorded by one call of `pier_record_deliveries` for `app`: the JSON answer.
async fn record_together(db: &TestDb, app: &str, pushes: &[(&str, &str)]) -> serde_json::Value {
    let n = pushes.len();
    let keys: Vec<String> = pushes.iter().map(|(k, _)| format!("{app}-{k}")).collect();
    let digests: Vec<String> = pushes
        .iter()
        .map(|(_, d)| format!("sha256:{d:0>64}"))
        .collect();
    let sqlx::types::Json(answer): sqlx::types::Json<serde_json::Value> = sqlx::query_scalar(
        "SELECT pier_record_deliveries($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                                       $14)",
    )
    .bind(vec!["local"; n])
    .bind(&keys)
    .bind(vec!["deploys"; n])
    .bind(vec!["[]"; n])
    .bind(vec![None::<Vec<u8>>; n])
    .bind(vec![None::<Uuid>; n])
    .bind((1..=n as i32).collect::<Vec<_>>())
    .bind(vec![app; n])
    .bind(vec!["webhook"; n])
    .bind(vec![format!("127.0.0.1:5000/demo/{app}"); n])
    .bind(vec!["main"; n])
    .bind(&digests)
    .bind(vec![false; n])
    .bind(vec![None::<String>; n])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    answer
}

/// A deployment as [`shape`] compares it: id, delivery, state, superseded by, digest.
type DeploymentRow = (Uuid, Option<Uuid>, String, Option<Uuid>, Option<String>);

/// An answer and the app's rows with every id replaced by the order in which it first
/// appears, so that two apps' histories compare.
async fn shape(db: &TestDb, app: &str, answers: &[serde_json::Value]) -> String {
    let rows: Vec<DeploymentRow> = sqlx::query_as(
        "SELECT d.id, d.delivery_id, d.state, d.superseded_by, d.claimed_digest
         FROM deployments d LEFT JOIN deliveries l ON l.id = d.delivery_id
         WHERE d.app = $1 ORDER BY l.event_key NULLS FIRST, d.claimed_digest",
    )
    .bind(app)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut text = serde_json::to_string(answers).unwrap();
    text.push_str(&format!("{rows:?}"));
    let mut names: HashMap<String, usize> = HashMap::new();
    let uuid =
        regex_lite::Regex::new("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
            .unwrap();
    uuid.replace_all(&text, |c: &regex_lite::Captures| {
        let next = names.len();
        format!("#{}", names.entry(c[0].to_owned()).or_insert(next))
    })
    .replace(&format!("{app}-"), "")
    .replace(&format!("\"app\":\"{app}\""), "\"app\":\"\"")
}

#[tokio::test]
async fn a_batch_of_pushes_for_one_app_is_recorded_as_if_they_came_one_by_one() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    // Each app runs digest 9 and has 1 queued; then the same pushes: a new digest, the queued
    // one again, the running one again, a retry of an earlier event, one digest pushed back
    // after another superseded it.
    let pushes = [
        ("e1", "2"),
        ("e2", "2"),
        ("e3", "9"),
        ("e4", "3"),
        ("e2", "4"),
        ("e5", "2"),
        ("e6", "2"),
        ("e7", "9"),
        ("e8", "5"),
    ];
    let mut shapes = Vec::new();
    for (app, together) in [("one", false), ("all", true)] {
        store.enqueue(push(app, "9")).await.unwrap();
        let running = store
            .claim("test", 1, Duration::from_secs(60))
            .await
            .unwrap()
            .expect("claimed");
        assert_eq!(running.app, app);
        store.enqueue(push(app, "1")).await.unwrap();
        let answers = if together {
            let all = record_together(&db, app, &pushes).await;
            all.as_array().unwrap().clone()
        } else {
            let mut each = Vec::new();
            for p in &pushes {
                let one = record_together(&db, app, &[*p]).await;
                each.push(one[0].clone());
            }
            each
        };
        shapes.push(shape(&db, app, &answers).await);
    }
    assert_eq!(shapes[0], shapes[1], "one by one, then all in one batch");
    // And what they are: one queued deployment, the newest push's.
    let queued: Vec<(String,)> = sqlx::query_as(
        "SELECT claimed_digest FROM deployments WHERE app = 'all' AND state = 'queued'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(queued, vec![(format!("sha256:{:0>64}", "5"),)]);
    let mut db = db;
    db.cleanup().await;
}
