//! Deliveries waiting at the same moment share one transaction (src/store/batch.rs), and
//! the queue's rules hold exactly as if they had come one by one.

use std::time::Duration;

use crate::support::*;
use pier::config::TagRule;
use pier::store::{
    DeliveryOutcome, DeploymentRequest, DeploymentState, Enqueued, NewDelivery, NewDeployment,
    Store, Trigger, pinned_reason,
};

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

/// A store whose every statement goes through a counting relay.
async fn counted_store(db: &TestDb) -> (Store, PgProxy) {
    let proxy = PgProxy::start(&db.url).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&proxy.url_for(&db.url))
        .await
        .expect("connect through the relay");
    (Store::from_pool(pool), proxy)
}

#[tokio::test]
async fn a_delivery_is_stored_with_one_statement_whatever_it_queues() {
    let db = TestDb::create().await;
    db.migrate().await;
    let (store, proxy) = counted_store(&db).await;
    // The first one opens the connection (its set-up statements are not the delivery's).
    store
        .record_delivery(delivery(0), None, vec![])
        .await
        .unwrap();
    let cases = [
        ("no app", delivery(1), vec![]),
        ("one app", delivery(2), vec![wanted("a", 2)]),
        (
            "two apps",
            delivery(3),
            vec![wanted("a", 3), wanted("b", 3)],
        ),
        ("a repeat", delivery(3), vec![wanted("a", 4)]),
    ];
    for (what, d, w) in cases {
        let before = proxy.statements();
        store.record_delivery(d, None, w).await.expect(what);
        assert_eq!(
            proxy.statements() - before,
            1,
            "{what}: one statement (no BEGIN, no COMMIT, no statement per queue rule)"
        );
    }
    // A burst shares statements: at most one per group commit, never one per delivery.
    let before = proxy.statements();
    const N: usize = 40;
    let outcomes = futures_util::future::join_all(
        (10..10 + N).map(|n| store.record_delivery(delivery(n), None, vec![wanted("a", n)])),
    )
    .await;
    assert!(outcomes.iter().all(|o| o.is_ok()));
    let used = proxy.statements() - before;
    assert!(used < N as u64 / 2, "{N} deliveries took {used} statements");
    let mut db = db;
    db.cleanup().await;
}

#[tokio::test]
async fn a_delivery_costs_one_round_trip_to_postgres_with_no_pings() {
    let db = TestDb::create().await;
    db.migrate().await;
    let (store, proxy) = counted_store(&db).await;
    // The first ones open the group commit's connection and prepare its two statements
    // (one for deliveries that queue nothing, one for the rest).
    store
        .record_delivery(delivery(0), None, vec![])
        .await
        .unwrap();
    store
        .record_delivery(delivery(100), None, vec![wanted("a", 100)])
        .await
        .unwrap();
    // One at a time, as a sender that waits for each answer: through sqlx's pool each
    // statement also cost a ping when the connection was lent and one when it came back.
    const N: usize = 20;
    let before = proxy.round_trips();
    for n in 1..=N {
        let wants = if n % 2 == 0 {
            vec![wanted("a", n)]
        } else {
            vec![]
        };
        store
            .record_delivery(delivery(n), None, wants)
            .await
            .unwrap();
    }
    assert_eq!(
        proxy.round_trips() - before,
        N as u64,
        "{N} deliveries one after another: one round trip each"
    );
    assert_eq!(store.count_deliveries().await.unwrap(), N as i64 + 2);
    let mut db = db;
    db.cleanup().await;
}

#[tokio::test]
async fn deliveries_that_queue_nothing_are_stored_and_their_repeats_still_counted() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    store
        .record_delivery(delivery(0), None, vec![])
        .await
        .unwrap();
    // A burst for repositories no app follows (a plain INSERT per batch), one event of it
    // twice and one an earlier delivery's repeat (left to the function).
    let burst = [1, 2, 2, 3, 0, 4];
    let outcomes = futures_util::future::join_all(
        burst
            .iter()
            .map(|&n| store.record_delivery(delivery(n), None, vec![])),
    )
    .await;
    let mut twos = Vec::new();
    for (n, outcome) in burst.iter().zip(outcomes) {
        match (n, outcome.unwrap()) {
            (0, DeliveryOutcome::Duplicate { .. }) => {}
            (2, o) => twos.push(o),
            (1 | 3 | 4, DeliveryOutcome::Recorded { deployments, .. }) => {
                assert!(deployments.is_empty())
            }
            (n, other) => panic!("delivery {n}: {other:?}"),
        }
    }
    // Whichever of the two came first is stored; the other is counted on it.
    match &twos[..] {
        [
            DeliveryOutcome::Recorded { delivery_id: a, .. },
            DeliveryOutcome::Duplicate { delivery_id: b },
        ]
        | [
            DeliveryOutcome::Duplicate { delivery_id: b },
            DeliveryOutcome::Recorded { delivery_id: a, .. },
        ] => {
            assert_eq!(a, b)
        }
        other => panic!("one event twice: {other:?}"),
    }
    let rows: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT verdict, reason, seen_count FROM deliveries WHERE event_key IN ('event-0', 'event-2')
         ORDER BY event_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let want = ("ignored".to_owned(), "deploys".to_owned(), 2);
    assert_eq!(rows, vec![want.clone(), want]);
    assert_eq!(store.count_deliveries().await.unwrap(), 5);
    let mut db = db;
    db.cleanup().await;
}

/// Tuples the app-history index has handed out, once the inserts of `inserted` deployments
/// are in the statistics (a backend reports its counters together, after its commits).
async fn history_index_reads(db: &TestDb, inserted: i64) -> i64 {
    wait_until(
        "the statistics show the inserts",
        Duration::from_secs(20),
        || async {
            let (ins, read): (i64, i64) = sqlx::query_as(
                "SELECT t.n_tup_ins, i.idx_tup_read
                 FROM pg_stat_user_tables t, pg_stat_user_indexes i
                 WHERE t.relname = 'deployments'
                   AND i.indexrelname = 'deployments_app_recent'",
            )
            .fetch_one(&db.pool)
            .await
            .ok()?;
            (ins >= inserted).then_some(read)
        },
    )
    .await
}

#[tokio::test]
async fn a_burst_of_pushes_for_one_app_never_scans_the_apps_history() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    // One after another from an empty table, as on a new installation: the statements are
    // planned (and their plans cached) while the table is empty. Such a plan used to look
    // for the app's queued deployment through its whole history, so each push read every
    // earlier one: about N * N / 2 index tuples.
    const N: usize = 200;
    for n in 0..N {
        store
            .record_delivery(delivery(n), None, vec![wanted("a", n)])
            .await
            .unwrap();
    }
    let read = history_index_reads(&db, N as i64).await;
    assert!(
        read < N as i64,
        "{N} pushes read {read} tuples of app a's history"
    );
    // Deployments asked for one at a time (a manual deploy, a version-guarded push) take
    // the transaction path: the same holds there.
    for n in 0..N {
        store.enqueue(wanted("b", n)).await.unwrap();
    }
    let read = history_index_reads(&db, 2 * N as i64).await - read;
    assert!(
        read < N as i64,
        "{N} deploys read {read} tuples of app b's history"
    );
    let queued = store.app_deployments("b", 5).await.unwrap();
    assert_eq!(queued[0].state, DeploymentState::Queued);
    let mut db = db;
    db.cleanup().await;
}

/// Runs `script` through `psql` on `db` with every planning reported: the `PLANNER
/// STATISTICS` lines of its stderr between the `\\warn` markers `from` and `to`.
fn plannings_between(db: &TestDb, script: &str, from: &str, to: &str) -> usize {
    use std::io::Write;
    let mut psql = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &db.url])
        // Bounded: a database that does not answer fails the test instead of hanging it.
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGOPTIONS", "-c statement_timeout=30000")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql (Debian: postgresql-client)");
    let mut stdin = psql.stdin.take().unwrap();
    stdin
        .write_all(
            format!("SET log_planner_stats = on;\nSET client_min_messages = log;\n{script}")
                .as_bytes(),
        )
        .unwrap();
    drop(stdin);
    let out = psql.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "psql failed: {err}");
    let start = err.find(from).expect("the first marker");
    let end = err.find(to).expect("the second marker");
    err[start..end].matches("PLANNER STATISTICS").count()
}

#[tokio::test]
async fn a_connection_plans_the_batch_statements_once_not_for_every_push() {
    let db = TestDb::create().await;
    db.migrate().await;
    // Pushes for one app, each superseding the one before, on one connection from an
    // empty table. The first few calls plan each statement inside (a cached plan is made
    // generic from the sixth use); after that only the call itself is planned. A lookup
    // planned afresh on every call (migration 0016) cost a fifth of a push's time.
    let push = |n: usize| {
        format!(
            "SELECT pier_record_deliveries(ARRAY['local'], ARRAY['event-{n}'],
               ARRAY['deploys a'], ARRAY['[]'], ARRAY[sha256('event-{n}'::bytea)],
               ARRAY[NULL::uuid], ARRAY[1], ARRAY['a'], ARRAY['webhook'],
               ARRAY['127.0.0.1:5000/demo/a'], ARRAY['main'], ARRAY['sha256:{n:064x}'],
               ARRAY[false], ARRAY[NULL::text]);\n"
        )
    };
    const WARM: usize = 8;
    const MEASURED: usize = 10;
    let mut script: String = (0..WARM).map(push).collect();
    script.push_str("\\warn measured-from\n");
    script.extend((WARM..WARM + MEASURED).map(push));
    script.push_str("\\warn measured-to\n");
    let plannings = plannings_between(&db, &script, "measured-from", "measured-to");
    assert_eq!(
        plannings, MEASURED,
        "{MEASURED} pushes after the first {WARM} were planned {plannings} times: \
         one planning per call is the call itself; more means a statement inside the \
         function is planned on every push"
    );
    // And they were recorded: every push superseded the one before.
    let store = Store::from_pool(db.pool.clone());
    let recent = store.app_deployments("a", 2).await.unwrap();
    assert_eq!(recent[0].state, DeploymentState::Queued);
    assert_eq!(recent[1].state, DeploymentState::Superseded);
    let mut db = db;
    db.cleanup().await;
}

/// What a delivery's rows look like once stored, for comparing the two ways of storing it.
async fn stored(store: &Store, outcome: &DeliveryOutcome) -> (String, String, Vec<String>) {
    let DeliveryOutcome::Recorded {
        delivery_id,
        deployments,
        ..
    } = outcome
    else {
        panic!("expected a recorded delivery, got {outcome:?}")
    };
    let d = store.delivery(*delivery_id).await.unwrap().unwrap();
    let queued = deployments
        .iter()
        .map(|e| match e {
            Enqueued::Queued { app, .. } => format!("queued {app}"),
            Enqueued::AlreadyPending { app, .. } => format!("pending {app}"),
        })
        .collect();
    (d.verdict.as_str().to_owned(), d.reason, queued)
}

#[tokio::test]
async fn a_version_guarded_delivery_keeps_the_rules_of_one_without_a_guard() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    // `b` is pinned by an operator (a rollback), `a` is not.
    let (_, pin) = store
        .pin_and_enqueue(wanted("b", 900), "admin (password)")
        .await
        .unwrap();
    // A version guard makes a delivery take a transaction (its versions are read first);
    // "main" is no version, so the guard itself holds nothing back.
    let rule = TagRule::from_versions(">=0.1.0").unwrap();
    let guarded = |w: Vec<NewDeployment>| -> Vec<DeploymentRequest> {
        w.into_iter()
            .map(|deployment| DeploymentRequest {
                deployment,
                never_older: Some(rule.clone()),
            })
            .collect()
    };
    let plain = |w: Vec<NewDeployment>| -> Vec<DeploymentRequest> {
        w.into_iter().map(DeploymentRequest::from).collect()
    };
    let mut n = 0;
    for (what, make) in [
        ("pinned and not", vec![("a", 1), ("b", 1)]),
        ("pinned only", vec![("b", 2)]),
        ("the same digest again", vec![("a", 1)]),
        ("a new digest", vec![("a", 3)]),
    ] {
        let mut seen = Vec::new();
        for way in [&guarded as &dyn Fn(_) -> _, &plain] {
            n += 1;
            // Each way on apps of its own name, so that neither sees the other's rows.
            let w: Vec<NewDeployment> = make
                .iter()
                .map(|(app, digest)| {
                    let app = if *app == "b" {
                        "b".to_owned()
                    } else {
                        format!("{app}{}", seen.len())
                    };
                    wanted(&app, *digest)
                })
                .collect();
            let outcome = store
                .record_delivery_with(delivery(1000 + n), None, way(w), None)
                .await
                .expect(what);
            let DeliveryOutcome::Recorded { pinned, .. } = &outcome else {
                panic!("{what}: {outcome:?}")
            };
            if make.iter().any(|(app, _)| *app == "b") {
                assert_eq!(pinned, &vec![pin.clone()], "{what}");
            }
            let (verdict, reason, queued) = stored(&store, &outcome).await;
            let reason = reason.replace("a1", "a0");
            let queued: Vec<String> = queued.iter().map(|q| q.replace("a1", "a0")).collect();
            seen.push((verdict, reason, queued));
        }
        assert_eq!(seen[0], seen[1], "{what}: both ways store the same");
    }
    assert_eq!(
        stored(
            &store,
            &store
                .record_delivery(delivery(5000), None, vec![wanted("b", 7)])
                .await
                .unwrap()
        )
        .await,
        ("pinned".to_owned(), pinned_reason(&pin), vec![])
    );
    let mut db = db;
    db.cleanup().await;
}

/// A waker that counts the wake-ups arriving while its task is being polled. Each is a
/// re-poll for nothing, and on the multi-thread runtime it also wakes an idle worker thread
/// that finds nothing to do: two futex calls and a context switch per delivery.
struct WakesWhilePolled {
    polling: std::sync::atomic::AtomicBool,
    counted: std::sync::atomic::AtomicUsize,
    task: std::task::Waker,
}

impl std::task::Wake for WakesWhilePolled {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.polling.load(SeqCst) {
            self.counted.fetch_add(1, SeqCst);
        }
        self.task.wake_by_ref();
    }
}

/// Polls `fut` to its end under a [`WakesWhilePolled`] waker: its output, and how many
/// times it woke its own task while being polled.
async fn self_wakes<T>(fut: impl std::future::Future<Output = T>) -> (T, usize) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut fut = std::pin::pin!(fut);
    let task = std::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone())).await;
    let counter = std::sync::Arc::new(WakesWhilePolled {
        polling: false.into(),
        counted: 0.into(),
        task,
    });
    let waker = std::task::Waker::from(counter.clone());
    let out = std::future::poll_fn(|_| {
        counter.polling.store(true, SeqCst);
        let polled = fut
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker));
        counter.polling.store(false, SeqCst);
        polled
    })
    .await;
    (out, counter.counted.load(SeqCst))
}

#[tokio::test]
async fn a_sender_that_drains_its_own_delivery_does_not_wake_itself() {
    let db = TestDb::create().await;
    db.migrate().await;
    let store = Store::from_pool(db.pool.clone());
    // The first opens the batch's connection; what is counted is a delivery's usual path.
    store
        .record_delivery(delivery(0), None, vec![])
        .await
        .unwrap();
    for n in 1..=4 {
        // Alternately one that queues nothing (the plain INSERT) and one that queues a
        // deployment (the function), each alone, so that its sender drains it.
        let wanted = if n % 2 == 0 {
            vec![wanted("a", n)]
        } else {
            vec![]
        };
        let (outcome, woke) = self_wakes(store.record_delivery(delivery(n), None, wanted)).await;
        assert!(
            matches!(outcome, Ok(DeliveryOutcome::Recorded { .. })),
            "{outcome:?}"
        );
        assert_eq!(woke, 0, "delivery {n} woke its own task while it ran");
    }
    let mut db = db;
    db.cleanup().await;
}
