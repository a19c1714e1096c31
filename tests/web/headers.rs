//! Every page and answer forbids framing and content sniffing.
//! Real Docker engine, real Distribution registry, real Postgres.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn pages_and_answers_forbid_framing_and_sniffing() {
    let env = TestEnv::start().await;
    for path in ["/", "/healthz", "/api/apps", "/deliveries"] {
        let resp = reqwest::Client::new()
            .get(env.pier_url(path))
            .bearer_auth(&env.admin_token)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        let h = resp.headers();
        let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert_eq!(get("x-frame-options"), "DENY", "{path}");
        assert_eq!(get("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(get("referrer-policy"), "same-origin", "{path}");
        assert!(
            get("content-security-policy").contains("frame-ancestors 'none'"),
            "{path}"
        );
    }
    env.cleanup().await;
}
