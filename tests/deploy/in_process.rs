//! Pier started inside the test process, on a listener and a shutdown token the test owns:
//! the HTTP app and the workers without spawning a binary.

use std::time::Duration;

use crate::support::*;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn pier_runs_in_process_on_a_given_listener_and_stops_on_its_token() {
    let mut db = TestDb::create().await;
    let secret = random_hex(32);
    let text = format!(
        "[server]\ndatabase_url = {db}\nworkers = 2\n\
         [[sources]]\nname = \"gen\"\nkind = \"generic\"\nhmac_secret = \"{secret}\"\n\
         [[apps]]\nname = \"inproc\"\nimage = \"127.0.0.1:9/demo/inproc\"\ntag = \"main\"\nport = 8080\n",
        db = toml::Value::String(db.url.clone())
    );
    let config = pier::config::Config::parse(&text, std::path::Path::new(".")).expect("config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(pier::serve::run_until(
        config,
        Some(listener),
        shutdown.clone(),
    ));

    let health = format!("http://{addr}/healthz");
    wait_until(
        "in-process pier answers",
        Duration::from_secs(20),
        || async { matches!(http_get(&health).await, Some((200, _))).then_some(()) },
    )
    .await;
    // An authentic delivery for a repository no app follows: stored, deploys nothing.
    let body = br#"{"repository": "demo/other", "tag": "main", "id": "in-process-1"}"#;
    let signature = sign_hmac_sha256(&secret, body);
    let (status, answer) = http_post(
        &format!("http://{addr}/hooks/gen"),
        &[
            ("Content-Type", "application/json"),
            ("X-Pier-Signature", &signature),
        ],
        body.to_vec(),
    )
    .await
    .expect("an answer");
    assert_eq!(status, 200, "{answer}");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 1);

    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("pier stops on its token");
    stopped.expect("no panic").expect("a clean stop");
    assert!(http_get(&health).await.is_none(), "the listener is closed");
    db.cleanup().await;
}
