//! The queue's and the journal's rules, against Postgres alone: no engine, no registry, no
//! Pier process. Claim, supersede, dedupe, lease fencing and takeover each take
//! milliseconds here; the end-to-end tests prove the rest.

use std::time::Duration;

use crate::support::*;
use pier::store::{
    DeploymentState, Enqueued, Lane, NewDelivery, NewDeployment, Step, Store, StoreError, Trigger,
    Verdict,
};
use sqlx::Connection;
use uuid::Uuid;

const LONG: Duration = Duration::from_secs(60);

async fn store() -> (TestDb, Store) {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    (db, store)
}

fn wanted(app: &str, digest: Option<&str>) -> NewDeployment {
    NewDeployment {
        app: app.to_owned(),
        trigger: Trigger::Webhook,
        delivery_id: None,
        image: format!("127.0.0.1:5000/demo/{app}"),
        requested_tag: Some("main".to_owned()),
        claimed_digest: digest.map(str::to_owned),
        pinned: false,
    }
}

fn queued_id(e: Enqueued) -> Uuid {
    match e {
        Enqueued::Queued { id, .. } => id,
        other => panic!("expected a queued deployment, got {other:?}"),
    }
}

/// A process's liveness: a connection of its own holding the advisory lock `key`, as
/// `pier`'s listener holds it. Dropping it is the process dying.
struct Holder {
    conn: sqlx::PgConnection,
    key: i64,
}

impl Holder {
    async fn new(db: &TestDb) -> Holder {
        let key = pier::worker::liveness_key();
        let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
        // The lock and its registration on this server, as `pier`'s listener takes them.
        let locked = pier::store::take_liveness(&mut conn, key)
            .await
            .expect("lock");
        assert!(locked);
        Holder { conn, key }
    }

    async fn die(self) {
        self.conn.close().await.expect("close");
    }
}

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

#[tokio::test]
async fn one_deployment_runs_per_app_and_the_oldest_queued_goes_first() {
    let (mut db, store) = store().await;
    let a = queued_id(store.enqueue(wanted("a", Some(&digest(1)))).await.unwrap());
    let b = queued_id(store.enqueue(wanted("b", Some(&digest(2)))).await.unwrap());
    let h = Holder::new(&db).await;

    let first = store.claim("w1", h.key, LONG).await.unwrap().unwrap();
    assert_eq!(first.id, a);
    assert_eq!(first.state, DeploymentState::Running);
    assert_eq!(first.attempt, 1);
    // A newer deployment of `a` waits while `a` runs; `b` is free to go.
    let a2 = queued_id(store.enqueue(wanted("a", Some(&digest(3)))).await.unwrap());
    let second = store.claim("w2", h.key, LONG).await.unwrap().unwrap();
    assert_eq!(second.id, b);
    assert!(store.claim("w3", h.key, LONG).await.unwrap().is_none());

    store
        .finish(a, "w1", DeploymentState::Succeeded, "done", None, None)
        .await
        .unwrap();
    let third = store.claim("w3", h.key, LONG).await.unwrap().unwrap();
    assert_eq!(third.id, a2);
    db.cleanup().await;
}

#[tokio::test]
async fn a_newer_queued_deployment_supersedes_the_older_one_and_one_digest_queues_once() {
    let (mut db, store) = store().await;
    let old = queued_id(store.enqueue(wanted("a", Some(&digest(1)))).await.unwrap());
    let again = store.enqueue(wanted("a", Some(&digest(1)))).await.unwrap();
    assert!(
        matches!(again, Enqueued::AlreadyPending { id, .. } if id == old),
        "the same (app, digest) is not queued twice: {again:?}"
    );
    let newer = store.enqueue(wanted("a", Some(&digest(2)))).await.unwrap();
    let Enqueued::Queued { id, superseded, .. } = newer else {
        panic!("expected queued");
    };
    assert_eq!(superseded, vec![old]);
    let old_row = store.deployment(old).await.unwrap().unwrap();
    assert_eq!(old_row.state, DeploymentState::Superseded);
    assert_eq!(old_row.superseded_by, Some(id));
    db.cleanup().await;
}

#[tokio::test]
async fn a_retried_delivery_is_stored_once_and_queues_nothing_more() {
    let (mut db, store) = store().await;
    let delivery = || NewDelivery {
        source: "local".into(),
        event_key: Some("event-1".into()),
        events: serde_json::json!([]),
        reason: "deploys a".into(),
    };
    let first = store
        .record_delivery(delivery(), None, vec![wanted("a", Some(&digest(1)))])
        .await
        .unwrap();
    let second = store
        .record_delivery(delivery(), None, vec![wanted("a", Some(&digest(2)))])
        .await
        .unwrap();
    assert!(matches!(
        first,
        pier::store::DeliveryOutcome::Recorded { .. }
    ));
    assert!(matches!(
        second,
        pier::store::DeliveryOutcome::Duplicate { .. }
    ));
    let deliveries = store.recent_deliveries(10).await.unwrap();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].verdict, Verdict::Queued);
    assert_eq!(deliveries[0].seen_count, 2);
    assert_eq!(store.recent_deployments(10).await.unwrap().len(), 1);
    db.cleanup().await;
}

#[tokio::test]
async fn a_deployment_whose_holder_died_is_taken_over_at_once_without_waiting_for_its_lease() {
    let (mut db, store) = store().await;
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    let dead = Holder::new(&db).await;
    let alive = Holder::new(&db).await;
    store.claim("dying", dead.key, LONG).await.unwrap().unwrap();
    assert!(
        store
            .claim("other", alive.key, LONG)
            .await
            .unwrap()
            .is_none(),
        "a live holder with a long lease keeps its deployment"
    );
    assert_eq!(
        store.next_wakeup(alive.key).await.unwrap(),
        Some(pier::store::TAKEOVER_CHECK),
        "another process's deployment is watched every second"
    );

    dead.die().await;
    // Postgres drops the lock when the backend notices the closed connection: at once,
    // but asynchronously, so wait for it with a deadline far below the 60 s lease.
    let taken = wait_until(
        "takeover after the holder died",
        Duration::from_secs(5),
        || {
            let store = store.clone();
            async move { store.claim("other", alive.key, LONG).await.unwrap() }
        },
    )
    .await;
    assert_eq!(taken.id, id);
    assert_eq!(taken.attempt, 2);
    assert_eq!(taken.lease_owner.as_deref(), Some("other"));
    alive.die().await;
    db.cleanup().await;
}

/// After a database restart a process's liveness lock is gone before its listener notices:
/// its workers must not take each other's deployments for a dead holder's.
#[tokio::test]
async fn a_process_whose_liveness_lock_is_lost_does_not_take_over_its_own_deployments() {
    let (mut db, store) = store().await;
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    // The process took its lock on this server, then lost its connection.
    let lost = Holder::new(&db).await;
    let key = lost.key;
    let first = store.claim("w0", key, LONG).await.unwrap().unwrap();
    assert_eq!(first.id, id);
    lost.die().await;
    assert!(
        store.claim("w1", key, LONG).await.unwrap().is_none(),
        "a worker of the same process took over its sibling's deployment"
    );
    // Another process takes it over at once: the holder's lock, taken here, is gone.
    let other = Holder::new(&db).await;
    let taken = wait_until(
        "takeover of the lost holder",
        Duration::from_secs(5),
        || {
            let store = store.clone();
            async move { store.claim("other", other.key, LONG).await.unwrap() }
        },
    )
    .await;
    assert_eq!((taken.id, taken.attempt), (id, 2));
    other.die().await;
    db.cleanup().await;
}

/// After a failover the promoted standby holds no liveness lock and knows of none taken on
/// it (its holders are alive, re-taking their locks as they reconnect): a missing lock says
/// nothing there, and only an expired lease lets another process take a deployment over.
#[tokio::test]
async fn a_holder_whose_lock_this_server_never_saw_taken_keeps_its_deployment_until_its_lease_ends()
{
    let (mut db, store) = store().await;
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    // Registered on an earlier instance of the server (a clean restart keeps the rows).
    let elsewhere = pier::worker::liveness_key();
    sqlx::query("INSERT INTO pier_holders (key, instance) VALUES ($1, '2000-01-01Z')")
        .bind(elsewhere)
        .execute(&db.pool)
        .await
        .unwrap();
    let lease = Duration::from_secs(2);
    store.claim("w0", elsewhere, lease).await.unwrap().unwrap();
    let other = Holder::new(&db).await;
    assert!(
        store
            .claim("other", other.key, LONG)
            .await
            .unwrap()
            .is_none(),
        "taken over for a lock this server never saw taken"
    );
    let stale: i64 = sqlx::query_scalar("SELECT count(*) FROM pier_holders WHERE key = $1")
        .bind(elsewhere)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stale, 0, "registrations of an earlier instance are pruned");
    let taken = wait_until(
        "takeover once the lease expired",
        Duration::from_secs(10),
        || {
            let store = store.clone();
            async move { store.claim("other", other.key, LONG).await.unwrap() }
        },
    )
    .await;
    assert_eq!((taken.id, taken.attempt), (id, 2));
    other.die().await;
    db.cleanup().await;
}

#[tokio::test]
async fn a_holder_cut_off_past_its_lease_is_fenced_out_of_every_write() {
    let (mut db, store) = store().await;
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    // Both processes stay alive (their locks are held): only the lease decides.
    let cut_off = Holder::new(&db).await;
    let successor = Holder::new(&db).await;
    let lease = Duration::from_millis(300);
    store
        .claim("cut-off", cut_off.key, lease)
        .await
        .unwrap()
        .unwrap();
    store
        .step_begin(
            id,
            "cut-off",
            Step::Resolve,
            Lane::WHOLE,
            &serde_json::json!({"tag": "main"}),
            1,
        )
        .await
        .unwrap();

    let taken = wait_until(
        "takeover after lease expiry",
        Duration::from_secs(5),
        || {
            let store = store.clone();
            async move { store.claim("successor", successor.key, LONG).await.unwrap() }
        },
    )
    .await;
    assert_eq!(taken.id, id);
    let before = store.steps(id).await.unwrap();

    let lost = |r: Result<(), StoreError>| matches!(r, Err(StoreError::LeaseLost));
    let result = serde_json::json!({"digest": "x"});
    assert!(lost(store.heartbeat(id, "cut-off", LONG).await));
    assert!(lost(
        store
            .step_succeed(id, "cut-off", Step::Resolve, Lane::WHOLE, &result, None)
            .await
    ));
    assert!(lost(
        store
            .step_fail(id, "cut-off", Step::Resolve, Lane::WHOLE, "late failure")
            .await
    ));
    assert!(lost(
        store
            .step_begin(
                id,
                "cut-off",
                Step::Pull,
                Lane {
                    service: "",
                    target: "local"
                },
                &serde_json::json!({}),
                1
            )
            .await
    ));
    assert!(lost(
        store
            .set_resolved(id, "cut-off", &digest(9), "linux/amd64")
            .await
    ));
    assert!(lost(
        store
            .finish(
                id,
                "cut-off",
                DeploymentState::Succeeded,
                "late",
                None,
                None
            )
            .await
    ));

    let after = store.steps(id).await.unwrap();
    assert_eq!(
        serde_json::to_value(&before).unwrap(),
        serde_json::to_value(&after).unwrap(),
        "the journal is exactly as the successor found it"
    );
    let row = store.deployment(id).await.unwrap().unwrap();
    assert_eq!(row.state, DeploymentState::Running);
    assert_eq!(row.lease_owner.as_deref(), Some("successor"));
    assert_eq!(row.resolved_digest, None);
    cut_off.die().await;
    successor.die().await;
    db.cleanup().await;
}

#[tokio::test]
async fn an_idle_queue_asks_for_no_wakeup_at_all() {
    let (mut db, store) = store().await;
    let h = Holder::new(&db).await;
    assert_eq!(store.next_wakeup(h.key).await.unwrap(), None);
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    assert_eq!(
        store.next_wakeup(h.key).await.unwrap(),
        None,
        "queued is not running"
    );
    store.claim("w", h.key, LONG).await.unwrap().unwrap();
    let own = store
        .next_wakeup(h.key)
        .await
        .unwrap()
        .expect("a lease runs");
    assert!(
        own > Duration::from_secs(50),
        "its own deployment is only rechecked at lease expiry, not {own:?}"
    );
    store
        .finish(id, "w", DeploymentState::Failed, "x", Some("y"), None)
        .await
        .unwrap();
    assert_eq!(store.next_wakeup(h.key).await.unwrap(), None);
    h.die().await;
    db.cleanup().await;
}

#[tokio::test]
async fn a_stored_value_the_code_does_not_know_is_an_error_that_names_it() {
    let (mut db, store) = store().await;
    let id = queued_id(store.enqueue(wanted("a", None)).await.unwrap());
    sqlx::query(
        "INSERT INTO deployment_steps (deployment_id, step, state, intent, attempt)
         VALUES ($1, 'teleport', 'started', '{}', 1)",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let err = store.steps(id).await.unwrap_err();
    let text = pier::error::error_chain(&err);
    assert!(
        text.contains("unknown pipeline step `teleport`"),
        "the error names the value: {text}"
    );
    db.cleanup().await;
}

/// Whether the connection the pool hands out next is inside a transaction someone else
/// began: in an explicit transaction `xact_start` is earlier than this statement's start.
async fn next_connection_is_poisoned(pool: &sqlx::PgPool) -> bool {
    // A simple-protocol query: outside a transaction it is its own, started with it.
    let row = sqlx::raw_sql(
        "SELECT xact_start <> query_start FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::Row::get::<bool, _>(&row, 0)
}

#[tokio::test]
async fn a_store_call_cancelled_at_any_moment_never_leaves_a_connection_in_a_transaction() {
    let (mut db, store) = store().await;
    let mut poisoned = 0;
    for i in 0..1500u64 {
        // Cancelled after 0 to 600 µs: before, during and after `BEGIN`.
        let cancel_after = std::time::Duration::from_micros((i * 7) % 600);
        let _ = tokio::time::timeout(
            cancel_after,
            store.enqueue(wanted("a", Some(&digest((i % 250) as u8)))),
        )
        .await;
        if next_connection_is_poisoned(&db.pool).await {
            poisoned += 1;
        }
    }
    assert_eq!(
        poisoned, 0,
        "connections handed out inside a stranger's transaction"
    );
    db.cleanup().await;
}

#[tokio::test]
async fn a_pinned_app_records_deliveries_as_pinned_and_queues_nothing_until_unpinned() {
    let (mut db, store) = store().await;
    let mut rollback = wanted("web", Some(&digest(1)));
    rollback.trigger = Trigger::Rollback;
    rollback.pinned = true;
    rollback.requested_tag = None;
    let (enqueued, pin) = store.pin_and_enqueue(rollback, "api token").await.unwrap();
    let rollback_id = queued_id(enqueued);
    assert_eq!(
        (pin.digest.as_str(), pin.by.as_str()),
        (digest(1).as_str(), "api token")
    );

    // A push for the pinned app, beside one for another app: only the other deploys, and
    // the rollback stays queued (a push would otherwise supersede it).
    let push = |key: &str| NewDelivery {
        source: "local".into(),
        event_key: Some(key.into()),
        events: serde_json::json!([]),
        reason: "deploys web, api".into(),
    };
    let out = store
        .record_delivery(
            push("e1"),
            None,
            vec![wanted("web", Some(&digest(2))), wanted("api", None)],
        )
        .await
        .unwrap();
    let pier::store::DeliveryOutcome::Recorded {
        delivery_id,
        deployments,
        pinned,
        ..
    } = out
    else {
        panic!("recorded")
    };
    assert_eq!(deployments.len(), 1);
    assert_eq!(pinned.len(), 1);
    assert_eq!(
        store.deployment(rollback_id).await.unwrap().unwrap().state,
        DeploymentState::Queued
    );
    assert_eq!(
        store.delivery(delivery_id).await.unwrap().unwrap().verdict,
        Verdict::Queued
    );

    // Only the pinned app: the verdict is `pinned`, with the pin in the reason.
    let out = store
        .record_delivery(push("e2"), None, vec![wanted("web", Some(&digest(3)))])
        .await
        .unwrap();
    let pier::store::DeliveryOutcome::Recorded {
        delivery_id,
        deployments,
        ..
    } = out
    else {
        panic!("recorded")
    };
    assert!(deployments.is_empty());
    let d = store.delivery(delivery_id).await.unwrap().unwrap();
    assert_eq!(d.verdict, Verdict::Pinned);
    assert!(
        d.reason
            .contains(&format!("web: pinned to {} by api token", digest(1))),
        "{}",
        d.reason
    );

    // Unpinned: the next push queues (and supersedes the waiting rollback, as any push).
    let was = store
        .unpin("web", "cli")
        .await
        .unwrap()
        .expect("was pinned");
    assert_eq!(was.digest, digest(1));
    assert!(store.pin("web").await.unwrap().is_none());
    assert!(store.unpin("web", "cli").await.unwrap().is_none());
    let out = store
        .record_delivery(push("e3"), None, vec![wanted("web", Some(&digest(4)))])
        .await
        .unwrap();
    let pier::store::DeliveryOutcome::Recorded { deployments, .. } = out else {
        panic!()
    };
    assert_eq!(deployments.len(), 1);
    db.cleanup().await;
}
