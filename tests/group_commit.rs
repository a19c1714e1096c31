//! Deliveries waiting at the same moment share one transaction (src/store/batch.rs), and
//! the queue's rules hold exactly as if they had come one by one.

mod support;

use pier::store::{
    DeliveryOutcome, DeploymentState, Enqueued, NewDelivery, NewDeployment, Store, Trigger,
};
use support::*;

fn wanted(app: &str, n: usize) -> NewDeployment {
    NewDeployment {
        app: app.to_owned(),
        trigger: Trigger::Webhook,
        delivery_id: None,
        image: format!("127.0.0.1:5000/demo/{app}"),
        requested_tag: Some("main".to_owned()),
        claimed_digest: Some(format!("sha256:{n:064x}")),
        pinned: false,
    }
}

fn delivery(n: usize) -> NewDelivery {
    NewDelivery {
        source: "local".into(),
        event_key: Some(format!("event-{n}")),
        events: serde_json::json!([]),
        reason: "deploys".into(),
    }
}

/// Transactions that stored the given table's rows (each row's inserting xid).
async fn transactions_in(db: &TestDb, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(DISTINCT xmin::text) FROM {table}"
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn pushes_for_one_app_arriving_together_commit_together_and_the_newest_stays_queued() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    const N: usize = 40;
    // Forty pushes of forty digests for one app, all waiting at once. One by one, each
    // would wait for the previous one's commit under the app's enqueue lock.
    let outcomes = futures_util::future::join_all(
        (0..N).map(|n| store.record_delivery(delivery(n), None, vec![wanted("a", n)])),
    )
    .await;
    let mut queued = Vec::new();
    for o in outcomes {
        match o.expect("recorded") {
            DeliveryOutcome::Recorded { deployments, .. } => match &deployments[..] {
                [Enqueued::Queued { id, superseded, .. }] => queued.push((*id, superseded.clone())),
                other => panic!("expected one queued deployment, got {other:?}"),
            },
            other => panic!("expected a recorded delivery, got {other:?}"),
        }
    }
    let tx = transactions_in(&db, "deliveries").await;
    assert!(
        tx <= 8,
        "{N} deliveries for one app took {tx} transactions: they were not committed together"
    );
    // Each push superseded the one before it, in arrival order; only the last is queued.
    for pair in queued.windows(2) {
        assert_eq!(
            pair[1].1,
            vec![pair[0].0],
            "each newer push supersedes the previous"
        );
    }
    let rows = store.app_deployments("a", 100).await.unwrap();
    assert_eq!(rows.len(), N);
    let still: Vec<_> = rows
        .iter()
        .filter(|d| d.state == DeploymentState::Queued)
        .collect();
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].id, queued.last().unwrap().0);
    let mut db = db;
    db.cleanup().await;
}

#[tokio::test]
async fn a_repeat_inside_the_same_batch_is_a_duplicate_and_other_apps_are_not_held_back() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    let requests = vec![
        (delivery(1), vec![wanted("a", 1), wanted("b", 1)]),
        (delivery(2), vec![wanted("b", 2), wanted("a", 2)]),
        (delivery(1), vec![wanted("a", 3)]),
        (delivery(3), vec![wanted("c", 3)]),
    ];
    let outcomes = futures_util::future::join_all(
        requests
            .into_iter()
            .map(|(d, w)| store.record_delivery(d, None, w)),
    )
    .await;
    let kinds: Vec<&str> = outcomes
        .iter()
        .map(|o| match o.as_ref().expect("recorded") {
            DeliveryOutcome::Recorded { .. } => "recorded",
            DeliveryOutcome::Duplicate { .. } => "duplicate",
            DeliveryOutcome::Replay { .. } => "replay",
        })
        .collect();
    assert_eq!(kinds, ["recorded", "recorded", "duplicate", "recorded"]);
    for app in ["a", "b", "c"] {
        let queued = store
            .app_deployments(app, 10)
            .await
            .unwrap()
            .into_iter()
            .filter(|d| d.state == DeploymentState::Queued)
            .count();
        assert_eq!(queued, 1, "app {app}");
    }
    assert_eq!(store.count_deliveries().await.unwrap(), 3);
    let mut db = db;
    db.cleanup().await;
}
