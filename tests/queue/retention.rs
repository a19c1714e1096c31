//! Retention against Postgres: old deliveries and old journals go, a bounded
//! number per pass; deployment rows, `create` steps and the serving generation's journal
//! stay.

use std::time::Duration;

use crate::support::*;
use pier::store::Store;
use uuid::Uuid;

const DAY: Duration = Duration::from_secs(86_400);

/// A finished deployment of `app`, `days` old, with a three-step journal; optionally linked
/// to a delivery of the same age.
async fn history(db: &TestDb, app: &str, days: i32, with_delivery: bool) -> (Uuid, Option<Uuid>) {
    let (dep, delivery) = (Uuid::new_v4(), with_delivery.then(Uuid::new_v4));
    let at = format!("now() - interval '{days} days'");
    if let Some(d) = delivery {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO deliveries (id, source, verdict, reason, events, received_at)
             VALUES ('{d}', 'local', 'queued', 'deploys {app}', '[]', {at})"
        )))
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let link = delivery.map_or("NULL".to_owned(), |d| format!("'{d}'"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO deployments (id, app, trigger, delivery_id, image, state, outcome,
                                  created_at, started_at, finished_at)
         VALUES ('{dep}', '{app}', 'webhook', {link}, 'r/{app}', 'succeeded', 'deployed',
                 {at}, {at}, {at});
         INSERT INTO deployment_steps (deployment_id, step, state, intent, result, attempt,
                                       started_at, finished_at)
         SELECT '{dep}', s, 'succeeded', '{{}}', '{{\"id\": \"c-{dep}\"}}', 1, {at}, {at}
         FROM unnest(ARRAY['resolve', 'create', 'start']) AS s"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    (dep, delivery)
}

async fn steps_of(db: &TestDb, dep: Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT step FROM deployment_steps WHERE deployment_id = $1 ORDER BY step")
        .bind(dep)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn old_journals_lose_all_but_create_and_the_serving_one_and_recent_ones_stay_whole() {
    let mut db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(history(&db, "a", 100, false).await.0);
    }
    let (serving, _) = history(&db, "b", 200, false).await;
    sqlx::query(
        "INSERT INTO app_generations (app, target, deployment_id, digest, container_id)
         VALUES ('b', 'local', $1, 'sha256:x', 'c')",
    )
    .bind(serving)
    .execute(&db.pool)
    .await
    .unwrap();
    let (recent, _) = history(&db, "a", 10, false).await;

    // Bounded: two deployments' journals per pass.
    let first = store.prune_steps(90 * DAY, 2).await.unwrap();
    assert_eq!(first, 4, "two deployments, two steps each (create stays)");
    while store.prune_steps(90 * DAY, 2).await.unwrap() > 0 {}
    for dep in &old {
        assert_eq!(
            steps_of(&db, *dep).await,
            ["create"],
            "only the record of what it made"
        );
        let row = store
            .deployment(*dep)
            .await
            .unwrap()
            .expect("the summary stays");
        assert_eq!(row.outcome.as_deref(), Some("deployed"));
        assert!(row.finished_at.is_some() && row.started_at.is_some());
    }
    assert_eq!(steps_of(&db, serving).await, ["create", "resolve", "start"]);
    assert_eq!(steps_of(&db, recent).await, ["create", "resolve", "start"]);
    // Pier still recognizes the containers the pruned deployments made.
    let made = format!("c-{}", old[0]);
    assert!(
        store
            .known_containers(std::slice::from_ref(&made))
            .await
            .unwrap()
            .contains(&made)
    );
    db.cleanup().await;
}

#[tokio::test]
async fn old_deliveries_are_deleted_in_bounded_passes_and_their_deployments_stay() {
    let mut db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    let mut linked = Vec::new();
    for _ in 0..3 {
        linked.push(history(&db, "a", 40, true).await);
    }
    let (_, Some(fresh)) = history(&db, "a", 1, true).await else {
        unreachable!()
    };
    assert_eq!(store.prune_deliveries(30 * DAY, 2).await.unwrap(), 2);
    assert_eq!(store.prune_deliveries(30 * DAY, 2).await.unwrap(), 1);
    assert_eq!(store.prune_deliveries(30 * DAY, 2).await.unwrap(), 0);
    for (dep, delivery) in linked {
        assert!(store.delivery(delivery.unwrap()).await.unwrap().is_none());
        let row = store
            .deployment(dep)
            .await
            .unwrap()
            .expect("the deployment stays");
        assert_eq!(row.delivery_id, None);
    }
    assert!(store.delivery(fresh).await.unwrap().is_some());
    db.cleanup().await;
}

#[tokio::test]
async fn no_policy_sends_no_statement() {
    let mut db = TestDb::create().await;
    db.migrate().await;
    // A store whose database is unreachable: any statement would fail.
    let store = Store::connect_lazy("postgres://pier:pier@127.0.0.1:1/none").unwrap();
    let none = pier::config::RetentionConfig::default();
    assert_eq!(
        store.apply_retention(&none).await.unwrap(),
        pier::store::Pruned::default()
    );
    db.cleanup().await;
}
