//! Every registry people push to can trigger a deploy, each verified as strongly
//! as it allows. For each source kind, a delivery in the sender's real shape (fixtures in
//! `tests/fixtures/intake/`), correctly authenticated, deploys the digest that the test's
//! real registry holds for the tag; the same delivery forged, unauthenticated, stale or
//! replayed stores nothing new and deploys nothing.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(90);

/// An environment whose registry notifies nobody: only the test's deliveries reach Pier.
async fn start(sources: &str) -> TestEnv {
    TestEnv::builder()
        .without_notifications()
        .sources_toml(sources)
        .start()
        .await
}

/// A fixture with its placeholders filled in for the env's first app.
fn render(fixture: &str, env: &TestEnv, tag: &str, digest: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/intake/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (owner, name) = env.repo().split_once('/').expect("repo is owner/name");
    let unique = u32::from_str_radix(&random_hex(7), 16).unwrap();
    let text = text
        .replace("{{registry}}", &env.registry_host())
        .replace("{{owner}}", owner)
        .replace("{{name}}", name)
        .replace("{{tag_lower}}", &tag.to_ascii_lowercase())
        .replace("{{tag}}", tag)
        .replace("{{digest_hex}}", digest.trim_start_matches("sha256:"))
        .replace("{{digest}}", digest)
        .replace("{{unique_hex}}", &random_hex(12))
        .replace("{{unique_2}}", &format!("{:02}", unique % 60))
        .replace("{{unique_3}}", &format!("{:03}", unique % 1000))
        .replace("{{unique}}", &unique.to_string());
    assert!(!text.contains("{{"), "unfilled placeholder in {fixture}");
    serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    text.into_bytes()
}

type Headers = Vec<(&'static str, String)>;

async fn post(env: &TestEnv, path: &str, headers: &Headers, body: &[u8]) -> (u16, Value) {
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, text) = env.post_hook(path, &pairs, body).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `(deliveries, deployments)` stored so far.
async fn stored(env: &TestEnv) -> (i64, i64) {
    sqlx::query_as("SELECT (SELECT count(*) FROM deliveries), (SELECT count(*) FROM deployments)")
        .fetch_one(&env.db.pool)
        .await
        .expect("count rows")
}

/// The delivery is answered `status` and nothing at all is stored.
async fn refused(env: &TestEnv, path: &str, headers: &Headers, body: &[u8], status: u16) {
    let before = stored(env).await;
    let (got, answer) = post(env, path, headers, body).await;
    assert_eq!(got, status, "{answer}");
    assert_eq!(
        stored(env).await,
        before,
        "a refused delivery stored something"
    );
}

/// Posts as a registry does: a 503 (its commit did not finish within the delivery's
/// deadline, as can happen on a loaded machine; the statement was cancelled, nothing was
/// stored) is sent again, a few times, after a growing pause.
async fn post_as_a_sender(
    env: &TestEnv,
    path: &str,
    headers: &Headers,
    body: &[u8],
) -> (u16, Value) {
    let mut pause = Duration::from_secs(1);
    for _ in 0..4 {
        let (status, answer) = post(env, path, headers, body).await;
        if status != 503 {
            return (status, answer);
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    post(env, path, headers, body).await
}

/// The delivery is answered 202 and its deployment runs exactly `digest`.
async fn deploys(env: &TestEnv, path: &str, headers: &Headers, body: &[u8], digest: &str) {
    let (status, answer) = post_as_a_sender(env, path, headers, body).await;
    assert_eq!(status, 202, "{answer:#}");
    let deployments = answer["deployments"].as_array().expect("deployments");
    assert_eq!(deployments.len(), 1, "{answer:#}");
    let id = deployments[0]["id"].as_str().expect("deployment id");
    let d = env.deployment_final(id, DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], digest, "{d:#}");
    assert_eq!(
        env.running_digests_of(env.app()).await,
        vec![digest.to_owned()]
    );
}

/// An authentic delivery seen before: 200, flagged as `verdict` ("duplicate" or
/// "replay"), and nothing new stored.
async fn not_again(env: &TestEnv, path: &str, headers: &Headers, body: &[u8], verdict: &str) {
    let before = stored(env).await;
    let (status, answer) = post(env, path, headers, body).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["delivery"][verdict], true, "{answer:#}");
    assert!(answer["deployments"].as_array().unwrap().is_empty());
    assert_eq!(stored(env).await, before, "a {verdict} stored something");
}

fn hex_hmac_sha1(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn json() -> (&'static str, String) {
    ("Content-Type", "application/json".to_owned())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn github_package_events_signed_with_any_listed_secret_deploy_and_forgeries_do_not() {
    let secret = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"gh\"\nkind = \"github\"\nhmac_secret = \"{}\"\nsecrets = [\"{secret}\"]\n",
        random_hex(32)
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("github_package.json", &env, "main", &digest);
    let headers = |sig: String, id: &str| -> Headers {
        vec![
            json(),
            ("X-GitHub-Event", "package".into()),
            ("X-GitHub-Delivery", id.into()),
            ("X-Hub-Signature-256", sig),
        ]
    };
    refused(
        &env,
        "gh",
        &headers(sign_hmac_sha256("wrong", &body), "d1"),
        &body,
        401,
    )
    .await;
    let mut unsigned = headers(String::new(), "d1");
    unsigned.pop();
    refused(&env, "gh", &unsigned, &body, 401).await;
    // The legacy SHA-1 header is not accepted in place of the SHA-256 one.
    let mut legacy = unsigned.clone();
    legacy.push((
        "X-Hub-Signature",
        format!("sha1={}", hex_hmac_sha1(&secret, &body)),
    ));
    refused(&env, "gh", &legacy, &body, 401).await;

    // The second listed secret verifies: a rotation needs no downtime.
    let good = |id: &str| headers(sign_hmac_sha256(&secret, &body), id);
    deploys(&env, "gh", &good("d1"), &body, &digest).await;
    not_again(&env, "gh", &good("d1"), &body, "duplicate").await;
    not_again(&env, "gh", &good("d2"), &body, "replay").await;
    env.cleanup().await;
}

#[tokio::test]
async fn github_form_encoded_registry_package_events_deploy() {
    let secret = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"gh\"\nkind = \"github\"\nsecrets = [\"{secret}\"]\n"
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let json_body = render("github_registry_package.json", &env, "main", &digest);
    let form =
        serde_urlencoded::to_string([("payload", String::from_utf8(json_body.clone()).unwrap())])
            .unwrap()
            .into_bytes();
    let headers = |sig: String| -> Headers {
        vec![
            ("Content-Type", "application/x-www-form-urlencoded".into()),
            ("X-GitHub-Event", "registry_package".into()),
            ("X-GitHub-Delivery", random_hex(16)),
            ("X-Hub-Signature-256", sig),
        ]
    };
    // GitHub signs the form body as sent, not the JSON inside it.
    refused(
        &env,
        "gh",
        &headers(sign_hmac_sha256(&secret, &json_body)),
        &form,
        401,
    )
    .await;
    deploys(
        &env,
        "gh",
        &headers(sign_hmac_sha256(&secret, &form)),
        &form,
        &digest,
    )
    .await;
    // A ping is authentic and deploys nothing.
    let ping = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#;
    let mut h = headers(sign_hmac_sha256(&secret, ping));
    h[0] = json();
    h[1] = ("X-GitHub-Event", "ping".into());
    let (status, answer) = post(&env, "gh", &h, ping).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["reason"], "ping");
    env.cleanup().await;
}

#[tokio::test]
async fn a_multi_platform_push_reported_per_manifest_by_github_deploys_once() {
    let secret = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"gh\"\nkind = \"github\"\nsecrets = [\"{secret}\"]\n"
    ))
    .await;
    let (index, amd64) = env.registry().push_index(env.repo(), "main", "multi").await;
    let post_signed = |body: Vec<u8>| {
        let env = &env;
        let secret = secret.clone();
        async move {
            let headers: Headers = vec![
                json(),
                ("X-GitHub-Event", "package".into()),
                ("X-GitHub-Delivery", random_hex(16)),
                ("X-Hub-Signature-256", sign_hmac_sha256(&secret, &body)),
            ];
            post(env, "gh", &headers, &body).await
        }
    };
    // GitHub's order: the untagged platform manifest first (its package_url ends in a
    // bare `:`), then the tagged index.
    let (status, answer) = post_signed(render("github_package.json", &env, "", &amd64)).await;
    assert_eq!(status, 200, "{answer:#}");
    assert!(
        answer["events"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("untagged"),
        "{answer:#}"
    );
    let (status, answer) = post_signed(render("github_package.json", &env, "main", &index)).await;
    assert_eq!(status, 202, "{answer:#}");
    let id = answer["deployments"][0]["id"].as_str().unwrap().to_owned();
    let d = env.deployment_final(&id, DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], amd64.as_str());
    // The same index reported again (a second tag event, a redelivery) queues nothing new.
    let (status, answer) = post_signed(render("github_package.json", &env, "main", &index)).await;
    assert!(status == 200 || status == 202, "{answer:#}");
    let rows = env.deployment_rows(env.app()).await;
    let ran: Vec<_> = rows
        .iter()
        .filter(|r| r.state == "succeeded" && r.resolved_digest.as_deref() == Some(&amd64))
        .collect();
    assert_eq!(env.running_digests_of(env.app()).await, vec![amd64.clone()]);
    assert!(!ran.is_empty());
    // One container ever created for the digest: a repeat is at most a no-op.
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);
    env.cleanup().await;
}

async fn gitea_like(kind: &str, signature_header: &'static str, event_header: &'static str) {
    let secret = random_hex(32);
    // The app follows `Main`; Gitea reports the tag lower-cased.
    let env = TestEnv::builder()
        .without_notifications()
        .app(|a| a.tag = "Main".into())
        .sources_toml(&format!(
            "[[sources]]\nname = \"git\"\nkind = \"{kind}\"\nsecrets = [\"{secret}\"]\n"
        ))
        .start()
        .await;
    let digest = env.push(&TestImage::healthy("v1"), "Main").await;
    let json_body = render("gitea_package.json", &env, "Main", &digest);
    let form =
        serde_urlencoded::to_string([("payload", String::from_utf8(json_body.clone()).unwrap())])
            .unwrap()
            .into_bytes();
    let headers = |ct: &str, sig: String, id: &str| -> Headers {
        vec![
            ("Content-Type", ct.into()),
            (event_header, "package".into()),
            ("X-Gitea-Event", "package".into()),
            ("X-Gitea-Delivery", id.into()),
            ("X-Forgejo-Delivery", id.into()),
            (signature_header, sig),
        ]
    };
    let form_ct = "application/x-www-form-urlencoded";
    // The signature covers the JSON text, not the form body that carries it.
    refused(
        &env,
        "git",
        &headers(form_ct, hmac_sha256_hex(&secret, &form), "g1"),
        &form,
        401,
    )
    .await;
    refused(
        &env,
        "git",
        &headers(form_ct, hmac_sha256_hex("wrong", &json_body), "g1"),
        &form,
        401,
    )
    .await;
    let good = |id: &str| headers(form_ct, hmac_sha256_hex(&secret, &json_body), id);
    deploys(&env, "git", &good("g1"), &form, &digest).await;
    not_again(&env, "git", &good("g1"), &form, "duplicate").await;
    not_again(&env, "git", &good("g2"), &form, "replay").await;
    // The same event as JSON is the same body: a replay too.
    let as_json = headers(
        "application/json",
        hmac_sha256_hex(&secret, &json_body),
        "g3",
    );
    not_again(&env, "git", &as_json, &json_body, "replay").await;
    env.cleanup().await;
}

#[tokio::test]
async fn gitea_package_events_signed_over_the_json_text_deploy_the_case_folded_tag() {
    gitea_like("gitea", "X-Gitea-Signature", "X-Gitea-Event").await;
}

#[tokio::test]
async fn forgejo_package_events_deploy_with_the_forgejo_signature() {
    gitea_like("forgejo", "X-Forgejo-Signature", "X-Forgejo-Event").await;
}

#[tokio::test]
async fn harbor_default_and_cloudevents_deliveries_with_the_auth_header_deploy() {
    let token = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"harbor\"\nkind = \"harbor\"\ntoken = \"{token}\"\n\
         [[sources]]\nname = \"harbor-ce\"\nkind = \"harbor\"\ntoken = \"{token}\"\n\
         registry = \"{{registry}}\"\n"
    ))
    .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("harbor_default.json", &env, "main", &v1);
    let auth = |t: &str| -> Headers { vec![json(), ("Authorization", t.into())] };
    refused(&env, "harbor", &auth("Bearer wrong"), &body, 401).await;
    refused(&env, "harbor", &vec![json()], &body, 401).await;
    // Harbor sends its "Auth Header" verbatim; a Bearer scheme is accepted too.
    deploys(&env, "harbor", &auth(&token), &body, &v1).await;
    not_again(&env, "harbor", &auth(&token), &body, "replay").await;

    // CloudEvents: the body names Harbor's external host; `registry` maps it to ours.
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    let ce = render("harbor_cloudevents.json", &env, "main", &v2);
    let ce_headers: Headers = vec![
        ("Content-Type", "application/cloudevents+json".into()),
        ("Authorization", format!("Bearer {token}")),
    ];
    deploys(&env, "harbor-ce", &ce_headers, &ce, &v2).await;
    not_again(&env, "harbor-ce", &ce_headers, &ce, "duplicate").await;
    env.cleanup().await;
}

#[tokio::test]
async fn zot_binary_cloudevents_with_a_bearer_token_deploy() {
    let token = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"zot\"\nkind = \"zot\"\ntokens = [\"{token}\"]\nregistry = \"{{registry}}\"\n"
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("zot_image_updated.json", &env, "main", &digest);
    let headers = |auth: Option<String>, id: &str| -> Headers {
        let mut h: Headers = vec![
            json(),
            ("Ce-Specversion", "1.0".into()),
            ("Ce-Id", id.into()),
            ("Ce-Source", "zotregistry.dev".into()),
            ("Ce-Type", "zotregistry.image.updated".into()),
            ("Ce-Time", "2026-03-02T10:11:12Z".into()),
        ];
        if let Some(a) = auth {
            h.push(("Authorization", a));
        }
        h
    };
    refused(
        &env,
        "zot",
        &headers(Some("Bearer nope".into()), "z1"),
        &body,
        401,
    )
    .await;
    refused(&env, "zot", &headers(None, "z1"), &body, 401).await;
    let good = |id: &str| headers(Some(format!("Bearer {token}")), id);
    deploys(&env, "zot", &good("z1"), &body, &digest).await;
    not_again(&env, "zot", &good("z1"), &body, "duplicate").await;
    env.cleanup().await;
}

#[tokio::test]
async fn dockerhub_deliveries_carry_their_token_in_the_url_and_it_is_never_logged() {
    let token = random_hex(32);
    let env = TestEnv::builder()
        .without_notifications()
        .pier_env("RUST_LOG", "pier=debug,tower_http=debug")
        .sources_toml(&format!(
            "[[sources]]\nname = \"hub\"\nkind = \"dockerhub\"\ntoken = \"{token}\"\nregistry = \"{{registry}}\"\n"
        ))
        .start()
        .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("dockerhub_push.json", &env, "main", &digest);
    let headers: Headers = vec![json()];
    refused(&env, "hub", &headers, &body, 401).await;
    refused(
        &env,
        &format!("hub/{}", random_hex(32)),
        &headers,
        &body,
        401,
    )
    .await;
    // A URL token for a source that does not take one is no such hook.
    refused(&env, &format!("gen/{token}"), &headers, &body, 404).await;
    // Nor is a URL that lost its source name: the token in the name's place is not logged.
    refused(&env, &token, &headers, &body, 404).await;
    deploys(&env, &format!("hub/{token}"), &headers, &body, &digest).await;
    not_again(&env, &format!("hub/{token}"), &headers, &body, "replay").await;

    let (_, metrics) = http_get(&env.pier_url("/metrics")).await.unwrap();
    let (_, deliveries) = http_get(&env.pier_url("/deliveries")).await.unwrap();
    let log = env.pier().log();
    assert!(
        log.contains("/hooks/{source}/{token}"),
        "the debug log records hook requests by route"
    );
    for (what, text) in [
        ("log", &log),
        ("metrics", &metrics),
        ("deliveries page", &deliveries),
    ] {
        assert!(
            !text.contains(&token),
            "the URL token leaked into the {what}"
        );
    }
    env.cleanup().await;
}

#[tokio::test]
async fn quay_redelivers_one_body_per_tag_and_it_deploys_whatever_the_tag_names_now() {
    let token = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"quay\"\nkind = \"quay\"\ntoken = \"{token}\"\n"
    ))
    .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("quay_repo_push.json", &env, "main", &v1);
    let path = format!("quay/{token}");
    let headers: Headers = vec![json()];
    refused(
        &env,
        &format!("quay/{}", random_hex(32)),
        &headers,
        &body,
        401,
    )
    .await;
    deploys(&env, &path, &headers, &body, &v1).await;
    // The same body after a real re-push of the tag: the new digest deploys.
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    deploys(&env, &path, &headers, &body, &v2).await;
    // The same body again with nothing new pushed: a no-op, what runs keeps running.
    let (status, answer) = post(&env, &path, &headers, &body).await;
    assert!(status == 200 || status == 202, "{answer:#}");
    if let Some(id) = answer["deployments"][0]["id"].as_str() {
        let d = env.deployment_final(id, DEPLOY).await;
        assert_eq!(d["state"], "succeeded", "{d:#}");
    }
    assert_eq!(env.running_digests_of(env.app()).await, vec![v2.clone()]);
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn artifactory_token_and_signing_modes_deploy_the_bare_hex_digest() {
    let token = random_hex(32);
    let secret = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"jf\"\nkind = \"artifactory\"\ntoken = \"{token}\"\n\
         access_method = \"port\"\nregistry = \"{{registry}}\"\n\
         [[sources]]\nname = \"jf-signed\"\nkind = \"artifactory\"\nmode = \"signing\"\nsecrets = [\"{secret}\"]\n\
         access_method = \"port\"\nregistry = \"{{registry}}\"\n"
    ))
    .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("artifactory_docker_pushed.json", &env, "main", &v1);
    let auth = |v: String| -> Headers { vec![json(), ("X-JFrog-Event-Auth", v)] };
    refused(&env, "jf", &auth("nope".into()), &body, 401).await;
    refused(&env, "jf", &vec![json()], &body, 401).await;
    deploys(&env, "jf", &auth(token.clone()), &body, &v1).await;

    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    let body = render("artifactory_docker_pushed.json", &env, "main", &v2);
    // In signing mode the header is an HMAC of the body: the bare secret is no longer enough.
    refused(&env, "jf-signed", &auth(secret.clone()), &body, 401).await;
    refused(
        &env,
        "jf-signed",
        &auth(hmac_sha256_hex(&random_hex(8), &body)),
        &body,
        401,
    )
    .await;
    deploys(
        &env,
        "jf-signed",
        &auth(hmac_sha256_hex(&secret, &body)),
        &body,
        &v2,
    )
    .await;
    env.cleanup().await;
}

/// JFrog Cloud's default access method: the image is `<host>/<repo_key>/<image_name>`,
/// and the event names the two parts apart. Here the Artifactory repository is the test
/// repository's owner and the image its name.
#[tokio::test]
async fn artifactory_repository_path_events_deploy_by_repo_key_and_image_name() {
    let token = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"jf\"\nkind = \"artifactory\"\ntoken = \"{token}\"\n"
    ))
    .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let auth: Headers = vec![json(), ("X-JFrog-Event-Auth", token.clone())];
    // The same push reported as the subdomain/port methods report it matches nothing here.
    let by_name = render("artifactory_docker_pushed.json", &env, "main", &v1);
    let (status, answer) = post(&env, "jf", &auth, &by_name).await;
    assert_eq!(
        status, 200,
        "no app is docker-local/<owner>/<name>: {answer:#}"
    );
    assert!(
        answer["deployments"].as_array().unwrap().is_empty(),
        "{answer:#}"
    );
    let body = render("artifactory_repository_path_pushed.json", &env, "main", &v1);
    deploys(&env, "jf", &auth, &body, &v1).await;
    env.cleanup().await;
}

#[tokio::test]
async fn nexus_component_events_signed_with_hmac_sha1_deploy_on_the_configured_registry() {
    let secret = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"nexus\"\nkind = \"nexus\"\nsecrets = [\"{secret}\"]\nregistry = \"{{registry}}\"\n"
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("nexus_component.json", &env, "main", &digest);
    let headers = |sig: Option<String>, id: &str| -> Headers {
        let mut h: Headers = vec![
            json(),
            ("X-Nexus-Webhook-Id", "rm:repository:component".into()),
            ("X-Nexus-Webhook-Delivery", id.into()),
        ];
        if let Some(s) = sig {
            h.push(("X-Nexus-Webhook-Signature", s));
        }
        h
    };
    refused(&env, "nexus", &headers(None, "n1"), &body, 401).await;
    refused(
        &env,
        "nexus",
        &headers(Some(hex_hmac_sha1("wrong", &body)), "n1"),
        &body,
        401,
    )
    .await;
    let good = |id: &str| headers(Some(hex_hmac_sha1(&secret, &body)), id);
    deploys(&env, "nexus", &good("n1"), &body, &digest).await;
    not_again(&env, "nexus", &good("n1"), &body, "duplicate").await;
    not_again(&env, "nexus", &good("n2"), &body, "replay").await;
    env.cleanup().await;
}

#[tokio::test]
async fn acr_single_event_deliveries_with_a_custom_authorization_header_deploy() {
    let token = random_hex(32);
    let env = start(&format!(
        "[[sources]]\nname = \"acr\"\nkind = \"acr\"\ntoken = \"{token}\"\n"
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("acr_push.json", &env, "main", &digest);
    let auth = |t: &str| -> Headers { vec![json(), ("Authorization", t.into())] };
    refused(&env, "acr", &auth("Bearer nope"), &body, 401).await;
    refused(&env, "acr", &vec![json()], &body, 401).await;
    deploys(
        &env,
        "acr",
        &auth(&format!("Bearer {token}")),
        &body,
        &digest,
    )
    .await;
    not_again(
        &env,
        "acr",
        &auth(&format!("Bearer {token}")),
        &body,
        "duplicate",
    )
    .await;
    let ping = br#"{"id":"p-1","timestamp":"2026-03-02T10:11:12Z","action":"ping"}"#;
    let (status, answer) = post(&env, "acr", &auth(&token), ping).await;
    assert_eq!(status, 200, "{answer}");
    env.cleanup().await;
}

#[tokio::test]
async fn standard_webhooks_deliveries_deploy_and_stale_or_replayed_ones_do_not() {
    let key = random_hex(24).into_bytes();
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(&key)
    );
    let env = start(&format!(
        "[[sources]]\nname = \"sw\"\nkind = \"generic\"\nmode = \"standard-webhooks\"\n\
         secrets = [\"whsec_{}\", \"{secret}\"]\n",
        base64::engine::general_purpose::STANDARD.encode(random_hex(24))
    ))
    .await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = render("standard_webhooks.json", &env, "main", &digest);
    let headers = |id: &str, ts: i64, sig: String| -> Headers {
        vec![
            json(),
            ("webhook-id", id.into()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", sig),
        ]
    };
    let sign = |id: &str, ts: i64, body: &[u8]| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        )
    };
    let now = unix_now();
    let stale = now - 600;
    refused(
        &env,
        "sw",
        &headers("m1", stale, sign("m1", stale, &body)),
        &body,
        401,
    )
    .await;
    refused(
        &env,
        "sw",
        &headers("m1", now, sign("m0", now, &body)),
        &body,
        401,
    )
    .await;
    refused(&env, "sw", &vec![json()], &body, 401).await;
    // Several signatures in one header: one of them verifying is enough.
    let several = format!("v1,AAAA {} v1a,ignored", sign("m1", now, &body));
    deploys(&env, "sw", &headers("m1", now, several), &body, &digest).await;
    not_again(
        &env,
        "sw",
        &headers("m1", now, sign("m1", now, &body)),
        &body,
        "duplicate",
    )
    .await;
    not_again(
        &env,
        "sw",
        &headers("m2", now, sign("m2", now, &body)),
        &body,
        "replay",
    )
    .await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_signed_generic_delivery_without_an_id_is_deduplicated_by_its_body() {
    let env = start("").await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = format!(
        r#"{{"repository":"{}","tag":"main","digest":"{digest}"}}"#,
        env.image()
    );
    let (status, answer) = env.post_generic(body.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");
    let before = stored(&env).await;
    let (status, answer) = env.post_generic(body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["delivery"]["replay"], true, "{answer:#}");
    assert_eq!(stored(&env).await, before);
    env.cleanup().await;
}

#[tokio::test]
async fn bad_input_to_a_new_kind_keeps_the_contract_and_stores_nothing() {
    let secret = random_hex(32);
    let env = TestEnv::builder()
        .without_notifications()
        .server_toml("max_body = \"16k\"")
        .sources_toml(&format!(
            "[[sources]]\nname = \"gh\"\nkind = \"github\"\nsecrets = [\"{secret}\"]\n"
        ))
        .start()
        .await;
    let signed = |ct: &str, body: &[u8]| -> Headers {
        vec![
            ("Content-Type", ct.into()),
            ("X-GitHub-Event", "package".into()),
            ("X-GitHub-Delivery", random_hex(16)),
            ("X-Hub-Signature-256", sign_hmac_sha256(&secret, body)),
        ]
    };
    let garbage = b"{\"package\": 7";
    refused(
        &env,
        "gh",
        &signed("application/json", garbage),
        garbage,
        400,
    )
    .await;
    refused(&env, "gh", &signed("text/plain", b"{}"), b"{}", 415).await;
    let big = vec![b' '; 32 * 1024];
    refused(&env, "gh", &signed("application/json", &big), &big, 413).await;
    refused(&env, "nope", &signed("application/json", b"{}"), b"{}", 404).await;
    // A wrong signature is 401 before the content type or the body is looked at.
    refused(
        &env,
        "gh",
        &vec![("Content-Type", "text/plain".into())],
        garbage,
        401,
    )
    .await;
    let (_, answer) = post(&env, "gh", &signed("application/json", garbage), garbage).await;
    assert!(
        answer["error"].as_str().unwrap().len() < 300,
        "a short reason: {answer}"
    );
    env.cleanup().await;
}
