//! Signed approval links, as a notification carries them, followed against a real Pier:
//! each opens the deployment's page with its action preselected once, for a signed-in
//! admin allowed to approve; without sign-in it decides and spends nothing; altered,
//! reused or expired, it is a clear 4xx page.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

/// `/deployments/…/link?…`: the path and query of a link that Pier sent.
fn path_of(env: &TestEnv, url: &str) -> String {
    url.strip_prefix(&env.pier_url(""))
        .unwrap_or_else(|| panic!("{url} is not on Pier's site"))
        .to_owned()
}

/// The value of `name` in a link's query.
fn param(link: &str, name: &str) -> String {
    let q = link.split_once('?').unwrap().1;
    serde_urlencoded::from_str::<Vec<(String, String)>>(q)
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {name} in {link}"))
}

/// The link with `name`'s value replaced.
fn with_param(link: &str, name: &str, value: &str) -> String {
    let (path, q) = link.split_once('?').unwrap();
    let mut pairs: Vec<(String, String)> = serde_urlencoded::from_str(q).unwrap();
    for (k, v) in &mut pairs {
        if k == name {
            *v = value.to_owned();
        }
    }
    format!("{path}?{}", serde_urlencoded::to_string(pairs).unwrap())
}

#[tokio::test]
async fn an_approval_link_opens_once_for_a_signed_in_approver_and_refuses_altered_or_expired() {
    let mut receiver = HookRecorder::start().await;
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(random_hex(32))
    );
    let (admins, [ops, _release, dev]) = crate::approvals::admins();
    let hook = |name: &str, extra: &str| {
        format!(
            "[[notifications]]\nname = \"{name}\"\nformat = \"standard-webhooks\"\n\
             url = \"{}\"\nsecret = \"{secret}\"\nevents = [\"deployment.awaiting_approval\"]\n{extra}\n",
            receiver.url(&format!("/{name}"))
        )
    };
    let env = TestEnv::builder()
        .sources_toml(&format!(
            "{admins}\n{}{}",
            hook("long", ""),
            hook("short", "link_lifetime = \"3s\"")
        ))
        .app(|a| {
            a.extra_toml =
                "approval = { required = 1, from = [\"ops\", \"release\"], expires = \"1h\" }"
                    .into()
        })
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let hooks = receiver.collect_until(DEPLOY, |got| got.len() >= 2).await;
    let links = |path: &str| -> Value {
        hooks.iter().find(|h| h.path == path).unwrap().json()["links"].clone()
    };
    let (long, short) = (links("/long"), links("/short"));
    let approve = path_of(&env, long["approve"].as_str().unwrap());
    let reject = path_of(&env, long["reject"].as_str().unwrap());
    let id = approve.split('/').nth(2).unwrap().to_owned();

    // Without a session: a page that asks again from Pier's own site, then sign-in with
    // the way back. Nothing is spent.
    let a = get_anonymous(&env.pier_url(&approve)).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body.contains("http-equiv=refresh"), "{a:?}");
    let a = get_anonymous(&env.pier_url(&format!("{approve}&hop=1"))).await;
    assert_eq!(a.status, 303, "{a:?}");
    assert!(a.location.unwrap().starts_with("/login?next="));

    // An admin who may not approve this app is refused, and spends nothing either.
    let dev_browser = SignedIn::new(&env.pier_url(""), "dev", &dev).await;
    let a = dev_browser.get(&approve).await;
    assert_eq!(a.status, 403, "{a:?}");

    // Altered: another action under approve's signature, a later expiry, another id.
    let ops_browser = SignedIn::new(&env.pier_url(""), "ops", &ops).await;
    let later = (param(&approve, "expires").parse::<i64>().unwrap() + 3600).to_string();
    for forged in [
        with_param(&approve, "action", "reject"),
        with_param(&approve, "expires", &later),
        approve.replace(&id, &uuid::Uuid::new_v4().to_string()),
    ] {
        let a = ops_browser.get(&forged).await;
        assert_eq!(a.status, 403, "{forged}: {a:?}");
        assert!(a.body.contains("not valid"), "{a:?}");
    }

    // Valid once: to the page with Approve preselected; the second time, 410.
    let a = ops_browser.get(&approve).await;
    assert_eq!(a.status, 303, "{a:?}");
    let to = a.location.unwrap();
    assert_eq!(to, format!("/deployments/{id}?decide=approve#decide"));
    let page = ops_browser.get(to.split('#').next().unwrap()).await;
    assert!(page.body.contains("id=\"link-approve\""), "{}", page.body);
    let a = ops_browser.get(&approve).await;
    assert_eq!(a.status, 410, "{a:?}");
    assert!(a.body.contains("used already"), "{a:?}");
    // The reject link is a link of its own.
    let a = ops_browser.get(&reject).await;
    assert_eq!(a.status, 303, "{a:?}");

    // Expired: refused after its lifetime, though never used.
    let short_approve = path_of(&env, short["approve"].as_str().unwrap());
    let expires: i64 = param(&short_approve, "expires").parse().unwrap();
    wait_until(
        "the short link's lifetime is over",
        Duration::from_secs(30),
        || async { (chrono::Utc::now().timestamp() > expires).then_some(()) },
    )
    .await;
    let a = ops_browser.get(&short_approve).await;
    assert_eq!(a.status, 410, "{a:?}");
    assert!(a.body.contains("expired"), "{a:?}");

    // The link decided nothing: the deployment still waits; the button does it.
    let (_, d) = env.api_get(&format!("/deployments/{id}")).await;
    assert_eq!(d["state"], "awaiting_approval", "{d:#}");
    let token = ops_browser
        .form_token(&format!("/deployments/{id}?decide=approve"))
        .await;
    let a = ops_browser
        .post(
            &format!("/deployments/{id}/approve"),
            &[("form_token", &token)],
            &[],
        )
        .await;
    assert_eq!(a.status, 303, "{a:?}");
    let d = env.deployment_final(&id, DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    env.cleanup().await;
}
