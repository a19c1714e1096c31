//! Digests: a daily summary per endpoint, put in the outbox once per period however many
//! Pier processes fire its timer, and sent like any notification.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_daily_digest_is_sent_once_by_two_piers_and_says_what_each_app_did() {
    let mut receiver = HookRecorder::start().await;
    let mut env = TestEnv::builder().start().await;
    let app = env.app().to_owned();
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded");

    // A digest whose period ends two seconds from now, after the deployment: each
    // process puts that period's digest in the outbox, by its timer or, if it starts
    // after the moment, when it starts; one insert wins.
    let at = (chrono::Utc::now() + chrono::Duration::seconds(2)).format("%H:%M:%S");
    env.add_sources_toml(&format!(
        "[[notifications]]\nname = \"daily\"\nformat = \"slack\"\nurl = \"{}\"\nevents = []\n\
         digest = \"daily\"\ndigest_at = \"{at} UTC\"\n",
        receiver.url("/digest")
    ));
    let (one, two) = tokio::join!(env.start_another_pier(), env.start_another_pier());
    for p in [&one, &two] {
        wait_until("each process fired its digest timer", DEPLOY, || async {
            p.log().contains("digest due").then_some(())
        })
        .await;
    }
    let inserted = [&one, &two]
        .iter()
        .filter(|p| p.log().contains("inserted=true"))
        .count();
    assert_eq!(inserted, 1, "exactly one process inserted the digest");

    let got = receiver.collect_until(DEPLOY, |got| !got.is_empty()).await;
    let text = got[0].json()["text"].as_str().unwrap().to_owned();
    assert!(text.starts_with("Pier daily digest"), "{text}");
    assert!(
        text.contains(&format!(
            "{app}: 1 succeeded, 0 failed, 0 rolled back, 0 cancelled; serves {digest}"
        )),
        "{text}"
    );
    let rows = wait_until("the digest is logged as sent", DEPLOY, || async {
        let (_, log) = env.api_get("/notifications").await;
        let all: Vec<_> = log["notifications"]
            .as_array()?
            .iter()
            .filter(|n| n["event"] == "digest")
            .cloned()
            .collect();
        (!all.is_empty() && all.iter().all(|n| n["state"] == "sent")).then_some(all)
    })
    .await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(rows[0]["deployment_id"].is_null());
    assert!(
        rows[0]["period"].as_str().unwrap().starts_with("daily:"),
        "{rows:#?}"
    );
    drop((one, two));
    env.cleanup().await;
}
