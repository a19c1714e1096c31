//! Signing in to the status page, and the forms that change something: a session cookie
//! stored hashed with an expiry, forms that need it plus its form token, cross-site posts
//! refused, failed sign-ins braked per address.

use crate::support::*;
use sha2::{Digest as _, Sha256};

async fn deployments(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM deployments")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

/// An argon2id hash with the smallest cost, so the test's many attempts stay fast.
fn cheap_hash(password: &str) -> String {
    use argon2::PasswordHasher;
    let params = argon2::Params::new(1024, 1, 1, None).unwrap();
    let salt = argon2::password_hash::SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_cross_site_form_post_is_refused_and_queues_nothing() {
    let env = TestEnv::start().await;
    let base = env.pier_url("");
    let admin = SignedIn::new(&base, "alice", &env.admin_token).await;
    let app_page = format!("/apps/{}", env.app());
    let redeploy = format!("/apps/{}/redeploy", env.app());
    let token = admin.form_token(&app_page).await;
    let form = [("form_token", token.as_str())];

    // Another site's page posting the form, with the admin's cookie and even the right
    // token: refused by the browser's own word (Sec-Fetch-Site) and by its Origin.
    let evil = [
        ("Origin", "https://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    let a = admin.post(&redeploy, &form, &evil).await;
    assert_eq!(a.status, 403, "{a:?}");
    let a = admin
        .post(&redeploy, &form, &[("Sec-Fetch-Site", "same-site")])
        .await;
    assert_eq!(a.status, 403, "a sibling subdomain is another site: {a:?}");
    let a = admin
        .post(
            &redeploy,
            &form,
            &[("Sec-Fetch-Site", ""), ("Origin", "https://evil.example")],
        )
        .await;
    assert_eq!(a.status, 403, "an old browser's foreign Origin: {a:?}");
    // Same site, but without the session's form token, or with another: refused too.
    let a = admin.post(&redeploy, &[], &[]).await;
    assert_eq!(a.status, 403, "{a:?}");
    let a = admin.post(&redeploy, &[("form_token", "0000")], &[]).await;
    assert_eq!(a.status, 403, "{a:?}");
    // Without a session: sent to sign in.
    let a = post_anonymous(&env.pier_url(&redeploy), "", &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    // A script's wrong bearer token: 401.
    let a = post_anonymous(
        &env.pier_url(&redeploy),
        "",
        &[("Authorization", "Bearer wrong")],
    )
    .await;
    assert_eq!(a.status, 401);
    // Signing in is a form too: another site cannot sign a browser in to its session.
    let body = format!("secret={}", env.admin_token);
    let a = post_anonymous(&env.pier_url("/login"), &body, &evil).await;
    assert_eq!(a.status, 403);
    assert_eq!(deployments(&env).await, 0, "nothing was queued");

    // The admin's own page: queued, and sent to the new deployment.
    let a = admin.post(&redeploy, &form, &[]).await;
    assert_eq!(a.status, 303, "{a:?}");
    assert!(a.location.unwrap().starts_with("/deployments/"));
    assert_eq!(deployments(&env).await, 1);

    // A name with a line break cannot forge a log line: control characters are dropped.
    SignedIn::new(&base, "eve\nINFO forged line", &env.admin_token).await;
    let names: Vec<String> = sqlx::query_scalar("SELECT user_name FROM sessions")
        .fetch_all(&env.db.pool)
        .await
        .unwrap();
    assert!(
        names.contains(&"eveINFO forged line".to_owned()),
        "{names:?}"
    );
    assert!(!env.pier().log().contains("\nINFO forged line"));
    env.cleanup().await;
}

#[tokio::test]
async fn without_a_session_pages_send_to_sign_in_and_sign_out_ends_it() {
    let env = TestEnv::builder()
        .server_toml("pages_need_sign_in = true")
        .start()
        .await;
    let base = env.pier_url("");
    for (path, next) in [
        ("/", "%2F"),
        ("/apps/web?before=x", "%2Fapps%2Fweb%3Fbefore%3Dx"),
        ("/deliveries", "%2Fdeliveries"),
        ("/events", "%2Fevents"),
        ("/apps/web/events", "%2Fapps%2Fweb%2Fevents"),
    ] {
        let a = get_anonymous(&format!("{base}{path}")).await;
        assert_eq!(a.status, 303, "{path}");
        assert_eq!(a.location.unwrap(), format!("/login?next={next}"), "{path}");
    }
    for open in ["/login", "/static/pier.css", "/static/pier.js", "/healthz"] {
        assert_eq!(
            get_anonymous(&format!("{base}{open}")).await.status,
            200,
            "{open}"
        );
    }
    // The API keeps its bearer token.
    let (code, _) = env.api_get("/apps").await;
    assert_eq!(code, 200);

    let admin = SignedIn::new(&base, "bob <b>", &env.admin_token).await;
    let cookie = &admin.set_cookie;
    assert!(cookie.starts_with("pier_session="), "{cookie}");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(cookie.contains(attr), "{attr} in {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    // Stored hashed: the database holds the SHA-256 of the cookie's value, never the value.
    let value = admin.cookie.split_once('=').unwrap().1.to_owned();
    let (hash, user): (Vec<u8>, String) = sqlx::query_as("SELECT id_hash, user_name FROM sessions")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(hash, Sha256::digest(value.as_bytes()).to_vec());
    assert_eq!(user, "bob <b>");
    let page = admin.get("/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("bob &#60;b&#62;"),
        "the name is shown, escaped"
    );
    assert!(!page.body.contains("bob <b>"));

    let token = admin.form_token("/").await;
    let a = admin.post("/logout", &[("form_token", &token)], &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    assert_eq!(admin.get("/").await.status, 303, "signed out");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    env.cleanup().await;
}

#[tokio::test]
async fn an_expired_session_is_refused() {
    let env = TestEnv::builder()
        .server_toml("pages_need_sign_in = true\nsession_ttl = \"1h\"")
        .start()
        .await;
    let base = env.pier_url("");
    let admin = SignedIn::new(&base, "carol", &env.admin_token).await;
    assert!(
        admin.set_cookie.contains("Max-Age=3600"),
        "{}",
        admin.set_cookie
    );
    let app_page = format!("/apps/{}", env.app());
    let token = admin.form_token(&app_page).await;
    sqlx::query("UPDATE sessions SET expires_at = now() - interval '1 second'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    let a = admin.get(&app_page).await;
    assert_eq!(a.status, 303);
    assert!(a.location.unwrap().starts_with("/login"));
    let redeploy = format!("/apps/{}/redeploy", env.app());
    let a = admin.post(&redeploy, &[("form_token", &token)], &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    assert_eq!(deployments(&env).await, 0);
    env.cleanup().await;
}

#[tokio::test]
async fn failed_sign_ins_are_braked_but_a_right_secret_always_signs_in() {
    let hash = cheap_hash("correct horse battery staple");
    let env = TestEnv::builder()
        .server_toml(&format!("admin_password_hash = \"{hash}\""))
        .start()
        .await;
    let base = env.pier_url("");
    SignedIn::new(&base, "dora", "correct horse battery staple").await;
    for i in 0..20 {
        let (a, cookie) = post_login(&base, "dora", &format!("wrong {i}")).await;
        assert_eq!(a.status, 401, "attempt {i}");
        assert!(cookie.is_none());
        assert!(a.body.contains("Wrong token or password"));
    }
    // Braked: a wrong secret is answered 429 now.
    let (a, cookie) = post_login(&base, "dora", "wrong again").await;
    assert_eq!(a.status, 429, "{a:?}");
    assert!(cookie.is_none());
    // The right password, and the token, still sign in: the brake never refuses them.
    let (a, cookie) = post_login(&base, "dora", "correct horse battery staple").await;
    assert_eq!(a.status, 303, "{a:?}");
    assert!(cookie.is_some());
    let (a, cookie) = post_login(&base, "dora", &env.admin_token).await;
    assert_eq!(a.status, 303, "{a:?}");
    assert!(cookie.is_some());
    env.cleanup().await;
}

#[tokio::test]
async fn behind_https_the_cookie_is_secure_and_the_public_origin_is_trusted() {
    let env = TestEnv::builder()
        .server_toml("public_url = \"https://pier.example.com\"")
        .start()
        .await;
    let base = env.pier_url("");
    // Not loopback: pages need a session by default.
    assert_eq!(get_anonymous(&format!("{base}/")).await.status, 303);
    let url = env.pier_url("/login");
    let body = format!("secret={}", env.admin_token);
    let a = post_anonymous(
        &url,
        &body,
        &[
            ("Origin", "https://pier.example.com"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    )
    .await;
    assert_eq!(
        a.status, 303,
        "the configured public origin is this site: {a:?}"
    );
    let (_, cookie) = post_login(&base, "erin", &env.admin_token).await;
    let cookie = cookie.unwrap();
    assert!(cookie.starts_with("__Host-pier_session="), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    env.cleanup().await;
}
