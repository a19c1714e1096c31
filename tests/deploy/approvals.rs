//! Approvals by named admins, deploy windows, freezes and overrides, through the
//! JSON API, the CLI and the pages, against the real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

const DEPLOY: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(30);

/// Three named admins, each with their own token: `(toml, [ops, release, dev])`.
pub(crate) fn admins() -> (String, [String; 3]) {
    let tokens = [random_hex(32), random_hex(32), random_hex(32)];
    let toml = ["ops", "release", "dev"]
        .iter()
        .zip(&tokens)
        .map(|(name, t)| format!("[[admins]]\nname = \"{name}\"\ntoken = \"{t}\"\n"))
        .collect::<Vec<_>>()
        .join("\n");
    (toml, tokens)
}

async fn start(app_lines: &str) -> (TestEnv, [String; 3]) {
    let (toml, tokens) = admins();
    let lines = app_lines.to_owned();
    let env = TestEnv::builder()
        .sources_toml(&toml)
        .app(move |a| a.extra_toml = lines)
        .start()
        .await;
    (env, tokens)
}

/// `POST /api/<path>` with `token` as bearer; `(status, json)`.
pub(crate) async fn api_post(env: &TestEnv, path: &str, token: &str, body: Value) -> (u16, Value) {
    let (status, text) = http_post(
        &env.pier_url(&format!("/api{path}")),
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string(),
    )
    .await
    .unwrap_or_else(|| panic!("no answer to POST /api{path}"));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Waits until the app's latest deployment is in `state`; returns it.
async fn latest_in(env: &TestEnv, state: &str, timeout: Duration) -> Value {
    let app = env.app().to_owned();
    wait_until(
        &format!("{app}'s latest deployment {state}"),
        timeout,
        || {
            let app = app.clone();
            async move {
                let (_, v) = env.api_get(&format!("/apps/{app}")).await;
                let d = v.get("latest_deployment")?.clone();
                (d.get("state")?.as_str()? == state).then_some(d)
            }
        },
    )
    .await
}

/// Waits until deployment `id` is in `state`; returns it (with steps and decisions).
async fn deployment_in(env: &TestEnv, id: &str, state: &str, timeout: Duration) -> Value {
    wait_until(
        &format!("deployment {id} {state}"),
        timeout,
        || async move {
            let (_, d) = env.api_get(&format!("/deployments/{id}")).await;
            (d.get("state")?.as_str()? == state).then_some(d)
        },
    )
    .await
}

fn id(d: &Value) -> String {
    d["id"].as_str().expect("deployment id").to_owned()
}

#[tokio::test]
async fn two_distinct_admins_must_approve_and_a_rejection_cancels_naming_who() {
    let (env, [ops, release, dev]) =
        start("approval = { required = 2, from = [\"ops\", \"release\"], expires = \"1h\" }").await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let waiting = latest_in(&env, "awaiting_approval", DEPLOY).await;
    let first = id(&waiting);
    let why = waiting["waiting_for"].as_str().unwrap();
    assert!(why.contains("2 approval(s) of ops, release"), "{why}");
    assert!(waiting["waiting_until"].is_string(), "{waiting:#}");
    assert!(
        env.running_digests_of(&app).await.is_empty(),
        "nothing runs yet"
    );

    // The shared token, an admin not in `from`, and a wrong token change nothing.
    let path = format!("/deployments/{first}/approve");
    let (code, body) = api_post(&env, &path, &env.admin_token, json!({})).await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = api_post(&env, &path, &dev, json!({})).await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = api_post(&env, &path, "wrong-token", json!({})).await;
    assert_eq!(code, 401);

    // ops approves twice: still one approval, still waiting.
    let (code, body) = api_post(&env, &path, &ops, json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"]["released"], false, "{body}");
    let (code, body) = api_post(&env, &path, &ops, json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"]["again"], true, "{body}");
    assert_eq!(body["decision"]["approvals"], json!(["ops"]), "{body}");
    let (_, still) = env.api_get(&format!("/deployments/{first}")).await;
    assert_eq!(still["state"], "awaiting_approval", "{still:#}");
    assert!(env.running_digests_of(&app).await.is_empty());

    // release is the second distinct admin: it runs now.
    let (code, body) = api_post(&env, &path, &release, json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"]["released"], true, "{body}");
    env.wait_app_version("v1", DEPLOY).await;
    let done = deployment_in(&env, &first, "succeeded", DEPLOY).await;
    let who: Vec<&str> = done["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["admin"].as_str().unwrap())
        .collect();
    assert_eq!(who, ["ops", "release"], "{done:#}");
    assert_eq!(done["attempt"], 1, "a wait is not a try: {done:#}");

    // A rejected one ends cancelled with who rejected it; v1 keeps serving.
    env.push(&TestImage::healthy("v2"), "main").await;
    let second = id(&latest_in(&env, "awaiting_approval", DEPLOY).await);
    let (code, body) = api_post(
        &env,
        &format!("/deployments/{second}/reject"),
        &release,
        json!({ "reason": "not before the release notes" }),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let rejected = deployment_in(&env, &second, "cancelled", WAIT).await;
    let outcome = rejected["outcome"].as_str().unwrap();
    assert!(
        outcome.contains("rejected by release: not before the release notes"),
        "{outcome}"
    );
    assert!(rejected["waiting_for"].is_null(), "{rejected:#}");
    let (code, body) = api_post(&env, &path, &ops, json!({})).await;
    assert_eq!(code, 409, "approving a finished one: {body}");
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn an_approval_request_that_expires_ends_cancelled_with_the_reason() {
    let mut receiver = HookRecorder::start().await;
    let (toml, [ops, ..]) = admins();
    let env = TestEnv::builder()
        .sources_toml(&toml)
        .sources_toml(&format!(
            "[[notifications]]\nname = \"chat\"\nurl = \"{}\"\nformat = \"slack\"\n\
             events = [\"deployment.awaiting_approval\"]\n",
            receiver.url("/slack")
        ))
        .app(|a| {
            a.extra_toml =
                "approval = { required = 2, from = [\"ops\", \"release\"], expires = \"3s\" }"
                    .into()
        })
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let waiting = latest_in(&env, "awaiting_approval", DEPLOY).await;
    let first = id(&waiting);
    let (code, body) = api_post(
        &env,
        &format!("/deployments/{first}/approve"),
        &ops,
        json!({}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // Nobody else approves: the one timer for its expiry ends it, no sweep needed.
    let expired = deployment_in(&env, &first, "cancelled", WAIT).await;
    let outcome = expired["outcome"].as_str().unwrap();
    assert!(
        outcome.contains("approval request expired after 3s with 1 of 2 approvals"),
        "{outcome}"
    );
    // What it waited for ended with it: nothing says "waits for" about a finished one.
    assert!(expired["waiting_for"].is_null(), "{expired:#}");
    assert!(expired["waiting_until"].is_null(), "{expired:#}");
    assert!(env.running_digests_of(env.app()).await.is_empty());

    // It was announced once when it started waiting, with a link to its page.
    let got = receiver.collect_until(WAIT, |h| !h.is_empty()).await;
    let text = got[0].json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("awaiting_approval"), "{text}");
    assert!(
        text.contains("waits for 2 approval(s) of ops, release"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}/deployments/{first}", env.pier_url(""))),
        "{text}"
    );
    assert!(
        receiver.next(Duration::from_secs(1)).await.is_none(),
        "once"
    );
    env.cleanup().await;
}

/// A daily UTC window opening `ahead` from now, an hour long (seconds given, so that a
/// test need not wait for a minute to turn).
fn window_ahead(ahead: Duration) -> (String, chrono::DateTime<chrono::Utc>) {
    let open = chrono::Utc::now() + chrono::Duration::from_std(ahead).unwrap();
    let close = open + chrono::Duration::hours(1);
    let w = format!(
        "daily {}-{} UTC",
        open.format("%H:%M:%S"),
        close.format("%H:%M:%S")
    );
    (w, open)
}

#[tokio::test]
async fn a_deployment_outside_its_window_waits_and_starts_when_the_window_opens() {
    let (w, open) = window_ahead(Duration::from_secs(20));
    let (env, _) = start(&format!("windows = [\"{w}\"]")).await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let waiting = latest_in(&env, "awaiting_window", DEPLOY).await;
    let why = waiting["waiting_for"].as_str().unwrap();
    assert!(why.contains(&w), "{why}");
    let until: chrono::DateTime<chrono::Utc> =
        waiting["waiting_until"].as_str().unwrap().parse().unwrap();
    assert_eq!(until.timestamp(), open.timestamp(), "{waiting:#}");
    env.wait_app_version("v1", DEPLOY).await;
    let done = deployment_in(&env, &id(&waiting), "succeeded", DEPLOY).await;
    let started: chrono::DateTime<chrono::Utc> =
        done["started_at"].as_str().unwrap().parse().unwrap();
    assert!(
        started >= until,
        "started {started} before the window opened {until}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_freeze_holds_deployments_and_an_override_runs_one_recording_its_reason() {
    let (env, [ops, ..]) = start("").await;
    let app = env.app().to_owned();
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/freeze"),
        &env.admin_token,
        json!({ "until": "1h", "reason": "year-end freeze" }),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, _) = api_post(&env, &format!("/apps/{app}/freeze"), &ops, json!({})).await;
    assert_eq!(code, 400, "a freeze needs until and a reason");

    env.push(&TestImage::healthy("v1"), "main").await;
    let waiting = latest_in(&env, "awaiting_window", DEPLOY).await;
    let why = waiting["waiting_for"].as_str().unwrap();
    assert!(why.contains("frozen by api token"), "{why}");
    assert!(why.contains("year-end freeze"), "{why}");
    let first = id(&waiting);
    let path = format!("/deployments/{first}/override");
    let (code, body) = api_post(&env, &path, &ops, json!({})).await;
    assert_eq!(code, 400, "an override needs a reason: {body}");
    let (code, body) = api_post(&env, &path, &env.admin_token, json!({ "reason": "x" })).await;
    assert_eq!(code, 403, "the shared token names nobody: {body}");
    let (code, body) = api_post(&env, &path, &ops, json!({ "reason": "security fix" })).await;
    assert_eq!(code, 200, "{body}");
    env.wait_app_version("v1", DEPLOY).await;
    let done = deployment_in(&env, &first, "succeeded", DEPLOY).await;
    assert_eq!(done["decisions"][0]["kind"], "override", "{done:#}");
    assert_eq!(done["decisions"][0]["admin"], "ops");
    assert_eq!(done["decisions"][0]["reason"], "security fix");

    // Still frozen for the next one; unfreezing lets it run at once.
    env.push(&TestImage::healthy("v2"), "main").await;
    let second = id(&latest_in(&env, "awaiting_window", DEPLOY).await);
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/unfreeze"),
        &env.admin_token,
        json!({}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["lifted"]["reason"], "year-end freeze", "{body}");
    env.wait_app_version("v2", DEPLOY).await;
    deployment_in(&env, &second, "succeeded", DEPLOY).await;
    env.cleanup().await;
}

#[tokio::test]
async fn approve_on_the_page_needs_a_named_admin_session_its_form_token_and_this_site() {
    let (env, [ops, ..]) =
        start("approval = { required = 1, from = [\"ops\"], expires = \"1h\" }").await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let dep = id(&latest_in(&env, "awaiting_approval", DEPLOY).await);
    let base = env.pier_url("");
    let page = format!("/deployments/{dep}");
    let approve = format!("/deployments/{dep}/approve");

    // No session: sent to sign in, nothing approved.
    let a = post_anonymous(
        &env.pier_url(&approve),
        "",
        &[("Sec-Fetch-Site", "same-origin")],
    )
    .await;
    assert_eq!(a.status, 303, "{a:?}");
    assert_eq!(a.location.as_deref(), Some("/login"), "{a:?}");
    // A named admin's name signs in only with that admin's own secret.
    let (a, cookie) = post_login(&base, "ops", &env.admin_token).await;
    assert_eq!(a.status, 401, "{a:?}");
    assert!(cookie.is_none());

    // Signed in with the shared token: no button, and the form is refused.
    let shared = SignedIn::new(&base, "alice", &env.admin_token).await;
    let p = shared.get(&page).await;
    assert!(p.body.contains("Sign in as a named admin"), "{}", p.body);
    assert!(!p.body.contains("id=\"approve\""));
    let token = shared.form_token(&page).await;
    let a = shared.post(&approve, &[("form_token", &token)], &[]).await;
    assert_eq!(a.status, 403, "{a:?}");

    // ops, signed in with their own token: a stale or cross-site form is refused.
    let admin = SignedIn::new(&base, "ops", &ops).await;
    let p = admin.get(&page).await;
    assert!(p.body.contains("id=\"approve\""), "{}", p.body);
    assert!(
        p.body.contains("Waits for 1 approval(s) of ops"),
        "{}",
        p.body
    );
    let token = admin.form_token(&page).await;
    let a = admin.post(&approve, &[("form_token", "stale")], &[]).await;
    assert_eq!(a.status, 403, "{a:?}");
    let evil = [
        ("Origin", "https://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    let a = admin.post(&approve, &[("form_token", &token)], &evil).await;
    assert_eq!(a.status, 403, "{a:?}");
    // Every new form: refused without a session, and from another site even with one.
    let app_path = format!("/apps/{}", env.app());
    for path in [
        format!("/deployments/{dep}/reject"),
        format!("/deployments/{dep}/override"),
        format!("{app_path}/freeze"),
        format!("{app_path}/unfreeze"),
    ] {
        let body = "reason=r&until=2h";
        let a = post_anonymous(
            &env.pier_url(&path),
            body,
            &[("Sec-Fetch-Site", "same-origin")],
        )
        .await;
        assert_eq!(a.location.as_deref(), Some("/login"), "{path}: {a:?}");
        let fields = [
            ("reason", "r"),
            ("until", "2h"),
            ("form_token", token.as_str()),
        ];
        let a = admin.post(&path, &fields, &evil).await;
        assert_eq!(a.status, 403, "{path}: {a:?}");
    }
    let (_, still) = env.api_get(&format!("/deployments/{dep}")).await;
    assert_eq!(still["state"], "awaiting_approval");
    assert!(
        still["decisions"].as_array().unwrap().is_empty(),
        "{still:#}"
    );

    let a = admin.post(&approve, &[("form_token", &token)], &[]).await;
    assert_eq!(a.status, 303, "{a:?}");
    env.wait_app_version("v1", DEPLOY).await;
    deployment_in(&env, &dep, "succeeded", DEPLOY).await;
    let p = admin.get(&page).await;
    assert!(
        p.body.contains("<strong>approve</strong> by ops"),
        "{}",
        p.body
    );

    // Freeze and unfreeze from the app page: a session and its form token, this site only.
    let app_page = format!("/apps/{}", env.app());
    let freeze = format!("{app_page}/freeze");
    let a = post_anonymous(
        &env.pier_url(&freeze),
        "until=2h&reason=x",
        &[("Sec-Fetch-Site", "same-origin")],
    )
    .await;
    assert_eq!(a.location.as_deref(), Some("/login"), "{a:?}");
    let token = admin.form_token(&app_page).await;
    let fields = [
        ("until", "2h"),
        ("reason", "load test"),
        ("form_token", token.as_str()),
    ];
    let a = admin.post(&freeze, &fields, &evil).await;
    assert_eq!(a.status, 403, "{a:?}");
    let frozen = "<strong>Frozen</strong>";
    assert!(!admin.get(&app_page).await.body.contains(frozen));
    let a = admin.post(&freeze, &fields, &[]).await;
    assert_eq!(a.status, 303, "{a:?}");
    let p = admin.get(&app_page).await;
    assert!(p.body.contains(frozen), "{}", p.body);
    assert!(p.body.contains("by user ops: load test"), "{}", p.body);
    let unfreeze = format!("{app_page}/unfreeze");
    let a = admin
        .post(&unfreeze, &[("form_token", token.as_str())], &[])
        .await;
    assert_eq!(a.status, 303, "{a:?}");
    assert!(!admin.get(&app_page).await.body.contains(frozen));
    env.cleanup().await;
}
