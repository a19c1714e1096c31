//! Outgoing notifications. A real Pier deploys on the real engine; a receiver in
//! this test (an axum server) checks every Standard Webhooks signature itself.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

const DEPLOY: Duration = Duration::from_secs(60);

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Verifies a Standard Webhooks request as any receiver library would: the signature is
/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, the timestamp is recent.
fn verify(secret: &str, hook: &RecordedHook) -> Result<(), String> {
    let key = b64()
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let h = |k: &str| hook.headers.get(k).cloned().ok_or(format!("no {k}"));
    let (id, ts, sigs) = (
        h("webhook-id")?,
        h("webhook-timestamp")?,
        h("webhook-signature")?,
    );
    let ts_n: i64 = ts.parse().map_err(|_| "timestamp not a number")?;
    if (chrono::Utc::now().timestamp() - ts_n).abs() > 300 {
        return Err(format!("timestamp {ts} is not recent"));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&hook.body);
    let want = format!("v1,{}", b64().encode(mac.finalize().into_bytes()));
    sigs.split(' ')
        .any(|s| s == want)
        .then_some(())
        .ok_or(format!("signature {sigs} is not {want}"))
}

#[tokio::test]
async fn each_outcome_is_sent_signed_to_a_standard_webhooks_receiver_and_as_text_to_slack() {
    let mut receiver = HookRecorder::start().await;
    let secret = format!("whsec_{}", b64().encode(random_hex(32)));
    let env = TestEnv::builder()
        .health_timeout(Duration::from_secs(3))
        .sources_toml(&format!(
            "[[notifications]]\nname = \"hooks\"\nurl = \"{}\"\nformat = \"standard-webhooks\"\n\
             secret = \"{secret}\"\n\
             [[notifications]]\nname = \"chat\"\nurl = \"{}\"\nformat = \"slack\"\n\
             events = [\"deployment.succeeded\", \"deployment.failed\"]\n",
            receiver.url("/sw"),
            receiver.url("/slack"),
        ))
        .start()
        .await;
    let app = env.app().to_owned();

    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded");
    env.push(&TestImage::no_health_file("v2"), "main").await;
    let second = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(second["state"], "failed");

    let hooks = receiver
        .collect_until(Duration::from_secs(30), |got| got.len() >= 4)
        .await;
    let signed: Vec<&RecordedHook> = hooks.iter().filter(|h| h.path == "/sw").collect();
    assert_eq!(signed.len(), 2, "{hooks:#?}");
    for h in &signed {
        verify(&secret, h).unwrap_or_else(|e| panic!("{e}: {h:#?}"));
        // The same bytes under another key, or changed bytes, do not verify.
        let mut forged = (*h).clone();
        forged.body.push(b' ');
        assert!(verify(&secret, &forged).is_err());
    }
    let events: Vec<Value> = signed.iter().map(|h| h.json()).collect();
    assert_eq!(events[0]["type"], "deployment.succeeded");
    assert_eq!(events[0]["data"]["digest"], v1.as_str());
    assert_eq!(events[0]["data"]["app"], app.as_str());
    assert_eq!(events[1]["type"], "deployment.failed");
    assert!(
        events[1]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("health")
    );
    let ids: Vec<&String> = signed.iter().map(|h| &h.headers["webhook-id"]).collect();
    assert_ne!(ids[0], ids[1]);

    let chat: Vec<Value> = hooks
        .iter()
        .filter(|h| h.path == "/slack")
        .map(|h| h.json())
        .collect();
    assert_eq!(chat.len(), 2, "{hooks:#?}");
    assert!(
        chat[0]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("{app} deployment"))
    );
    assert!(chat[0]["text"].as_str().unwrap().contains("succeeded"));
    assert!(chat[1]["text"].as_str().unwrap().contains("failed"));

    // The delivery log says each was sent at the first attempt. The receiver has the
    // bytes a moment before the sender commits the outcome, so wait for the log to settle.
    let log = wait_until(
        "the four notifications are logged as finished",
        Duration::from_secs(30),
        || async {
            let (code, log) = env.api_get("/notifications").await;
            assert_eq!(code, 200);
            let all = log["notifications"].as_array()?;
            (all.len() == 4 && all.iter().all(|n| n["state"] != "pending")).then_some(log)
        },
    )
    .await;
    let all = log["notifications"].as_array().unwrap();
    for n in all {
        assert_eq!(n["state"], "sent", "{n:#}");
        assert_eq!(n["log"].as_array().unwrap().len(), 1);
        assert_eq!(n["log"][0]["status"], 200);
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_receiver_that_is_down_gets_bounded_retries_and_the_log_shows_each_one() {
    // Nothing listens there; the path is a credential, as in a Slack URL.
    let down = format!(
        "http://127.0.0.1:{}/services/T0/B0/SECRET{}",
        free_port(),
        random_hex(12)
    );
    let env = TestEnv::builder()
        .sources_toml(&format!(
            "[[notifications]]\nname = \"down\"\nurl = \"{down}\"\nformat = \"slack\"\n\
             max_attempts = 3\nbackoff = \"300ms\"\ntimeout = \"2s\"\n"
        ))
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded");

    let n = wait_until(
        "the notification has given up",
        Duration::from_secs(30),
        || async {
            let (_, log) = env.api_get("/notifications").await;
            let n = log["notifications"].as_array()?.first()?.clone();
            (n["state"] == "failed").then_some(n)
        },
    )
    .await;
    assert_eq!(n["attempts"], 3, "{n:#}");
    assert_eq!(n["deployment_id"], d["id"]);
    let attempts = n["log"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{n:#}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["attempt"], i as i64 + 1);
        assert!(a["status"].is_null());
        assert!(!a["error"].as_str().unwrap().is_empty(), "{a:#}");
    }
    // Retries were spaced by the backoff (300 ms, then 600 ms), not sent in a burst.
    let at = |i: usize| {
        chrono::DateTime::parse_from_rfc3339(attempts[i]["at"].as_str().unwrap()).unwrap()
    };
    assert!((at(1) - at(0)).num_milliseconds() >= 250, "{n:#}");
    assert!((at(2) - at(1)).num_milliseconds() >= 550, "{n:#}");

    // The URL's secret path is in no log line and no answer.
    let secret = down.rsplit('/').next().unwrap().to_owned();
    assert!(!env.pier().log().contains(&secret));
    let (_, log) = env.api_get("/notifications").await;
    assert!(!log.to_string().contains(&secret));
    env.cleanup().await;
}
