//! The status page while something happens: a deployment's page follows the journal live
//! over server-sent events fed by Postgres LISTEN/NOTIFY (so the work of another Pier
//! process shows up), the stream ends when the deployment is final, streams are capped;
//! and every page escapes what senders, registries and apps write.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

async fn newest_deployment(env: &TestEnv) -> uuid::Uuid {
    wait_until("a deployment is queued", DEPLOY, || async {
        sqlx::query_scalar("SELECT id FROM deployments ORDER BY created_at DESC LIMIT 1")
            .fetch_optional(&env.db.pool)
            .await
            .unwrap()
    })
    .await
}

#[tokio::test]
async fn a_deployment_page_follows_another_processs_work_live_and_its_stream_ends_when_final() {
    let env = TestEnv::start().await;
    let web = web_only(&env).await;
    env.push(&TestImage::slow_start("v1", 3), "main").await;
    let id = newest_deployment(&env).await;

    // While it runs, the page says so, links its stream and offers a plain refresh.
    let (code, page) = http_get(&format!("{}/deployments/{id}", web.base))
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert!(
        page.contains(&format!("data-live=\"/deployments/{id}/events\"")),
        "{page}"
    );
    assert!(page.contains("Refresh</a>"));
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "no reloading page"
    );

    let (events, ended) =
        read_events(&format!("{}/deployments/{id}/events", web.base), DEPLOY).await;
    assert!(ended, "the stream ends once the deployment is final");
    let (last, before) = events.split_last().expect("events");
    assert_eq!(last.name, "final", "{events:#?}");
    assert!(
        last.data.contains("id=\"state\">succeeded"),
        "{}",
        last.data
    );
    assert!(last.data.contains("health"));
    // Before the end, it showed the deployment at its health step (3 s of a slow start),
    // as the other process journaled it.
    assert!(
        before.iter().any(|e| e.name == "timeline"
            && e.data.contains("s-started")
            && e.data.contains(">health<")),
        "{before:#?}"
    );
    // A final deployment's page is not live, and its stream is one final event.
    let (_, page) = http_get(&format!("{}/deployments/{id}", web.base))
        .await
        .unwrap();
    assert!(!page.contains("data-live"), "{page}");
    let (events, ended) = read_events(
        &format!("{}/deployments/{id}/events", web.base),
        Duration::from_secs(10),
    )
    .await;
    assert!(ended);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "final");
    env.cleanup().await;
}

#[tokio::test]
async fn event_streams_are_capped() {
    let env = TestEnv::start().await;
    let web = web_only(&env).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut open = Vec::new();
    for i in 0..64 {
        let mut resp = client
            .get(format!("{}/events", web.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        // Established: its first event (the overview) has arrived.
        let first = resp.chunk().await.unwrap().expect("a first event");
        assert!(
            String::from_utf8_lossy(&first).contains("event: overview"),
            "stream {i}"
        );
        open.push(resp);
    }
    let refused = client
        .get(format!("{}/events", web.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    drop(open);
    wait_until("a slot is free again", Duration::from_secs(10), || async {
        let r = client
            .get(format!("{}/events", web.base))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    env.cleanup().await;
}

#[tokio::test]
async fn every_page_escapes_tags_errors_and_log_lines() {
    const LOG: &str = "<script>alert('log')</script>";
    const TAG: &str = "<img src=x onerror=alert(1)>";
    let env = TestEnv::builder()
        .app(|a| {
            a.tag = "*".into();
            a.env.insert("GREETING".into(), LOG.into());
        })
        .start()
        .await;
    // A candidate whose log prints its environment: the script lands in its last lines.
    env.push(&TestImage::exits_at_once("v1"), "main").await;
    let failed = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert!(failed["candidate_logs"].as_str().unwrap().contains(LOG));
    // A signed sender naming a tag that carries markup: recorded, resolved, failed.
    let body = serde_json::json!({ "repository": env.image(), "tag": TAG }).to_string();
    let (code, answer) = env.post_generic(body.as_bytes()).await;
    assert!(code == 202 || code == 200, "{code} {answer}");
    let first = failed["id"].as_str().unwrap().to_owned();
    let tagged = env.latest_final_of(env.app(), &[&first], DEPLOY).await;
    assert_eq!(tagged["requested_tag"], TAG, "{tagged:#}");

    let ids = [first, tagged["id"].as_str().unwrap().to_owned()];
    let mut pages = vec![
        "/".to_owned(),
        format!("/apps/{}", env.app()),
        "/deliveries".into(),
    ];
    pages.extend(ids.iter().map(|id| format!("/deployments/{id}")));
    let mut shown = String::new();
    for path in &pages {
        let (code, page) = http_get(&env.pier_url(path)).await.unwrap();
        assert_eq!(code, 200, "{path}");
        for raw in [LOG, TAG, "<script>", "<img"] {
            assert!(!page.contains(raw), "{path} shows {raw} unescaped");
        }
        shown.push_str(&page);
    }
    // And they are shown, escaped: the log line, the tag, the error naming the tag.
    assert!(shown.contains("&#60;script&#62;alert(&#39;log&#39;)&#60;/script&#62;"));
    assert!(shown.contains("&#60;img src=x onerror=alert(1)&#62;"));
    // The live fragments are the same templates: escaped too.
    let (events, _) = read_events(
        &env.pier_url(&format!("/deployments/{}/events", ids[0])),
        Duration::from_secs(10),
    )
    .await;
    assert!(!events[0].data.contains(LOG) && events[0].data.contains("&#60;script&#62;"));
    env.cleanup().await;
}

/// An unpin queues nothing and touches no deployment, yet an open overview shows it at
/// once: the `pins` trigger announces it on the same channel as the journal.
#[tokio::test]
async fn the_overview_shows_a_pin_and_its_removal_live() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let client = reqwest::Client::new();
    let api = |path: &str| {
        client
            .post(env.pier_url(&format!("/api/apps/{app}/{path}")))
            .bearer_auth(&env.admin_token)
    };
    let resp = api("rollback")
        .json(&serde_json::json!({ "digest": v1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let body: serde_json::Value = resp.json().await.unwrap();
    let id = body["deployment"]["id"].as_str().expect("deployment id");
    // Final, so that no step of it can refresh the overview after the unpin below.
    let done: serde_json::Value = client
        .get(env.pier_url(&format!("/api/deployments/{id}?wait=60s")))
        .bearer_auth(&env.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["state"], "succeeded", "{done:#}");

    let url = env.pier_url("/events");
    let (pinned_tx, pinned_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut pinned_tx = Some(pinned_tx);
        read_events_until(&url, Duration::from_secs(30), move |e| {
            let shows_pin = e.data.contains("<dt>Pinned</dt>");
            if shows_pin && let Some(tx) = pinned_tx.take() {
                let _ = tx.send(());
            }
            pinned_tx.is_none() && !shows_pin
        })
        .await
    });
    tokio::time::timeout(Duration::from_secs(15), pinned_rx)
        .await
        .expect("the overview shows the pin")
        .unwrap();
    let resp = api("unpin")
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (events, met) = reader.await.unwrap();
    assert!(
        met,
        "no overview event after the unpin: {:?}",
        events.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    env.cleanup().await;
}
