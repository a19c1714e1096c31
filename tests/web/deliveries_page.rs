//! `GET /deliveries`: every authentic delivery with its verdict and its
//! deployments, filterable by source and verdict, a page at a time; repeats counted on the
//! row they repeat; an admin can redeliver a stored delivery. Real registry, engine and
//! Postgres.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);

async fn page(env: &TestEnv, query: &str) -> (u16, String) {
    http_get(&env.pier_url(&format!("/deliveries{query}")))
        .await
        .expect("deliveries page answers")
}

fn rows(html: &str) -> usize {
    html.matches("class=\"delivery\"").count()
}

async fn count(env: &TestEnv, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&env.db.pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn deliveries_are_filtered_paged_counted_when_repeated_and_redelivered_by_an_admin() {
    let env = TestEnv::builder().without_notifications().start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let body = format!(
        r#"{{"repository": "{}", "tag": "main", "id": "push-1"}}"#,
        env.repo()
    );
    let (status, answer) = env.post_generic(body.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");
    env.wait_app_version("v1", DEPLOY).await;
    // A sender's retry: the same delivery id again, counted on the first row.
    let (status, answer) = env.post_generic(body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"duplicate\":true"), "{answer}");
    // An event no app follows: ignored, with why.
    let other = r#"{"repository": "demo/nobody", "tag": "main", "id": "push-2"}"#;
    assert_eq!(env.post_generic(other.as_bytes()).await.0, 200);
    assert_eq!(count(&env, "SELECT count(*) FROM deliveries").await, 2);

    let (code, all) = page(&env, "").await;
    assert_eq!(code, 200);
    assert_eq!(rows(&all), 2, "{all}");
    let (_, queued) = page(&env, "?verdict=queued").await;
    assert_eq!(rows(&queued), 1);
    assert!(queued.contains("/deployments/"), "links to its deployment");
    assert!(
        queued.contains("tag main"),
        "names the rule that matched: {queued}"
    );
    let (_, dup) = page(&env, "?verdict=duplicate&source=gen").await;
    assert_eq!(rows(&dup), 1);
    assert!(dup.contains("1 duplicate<br>"), "{dup}");
    let (_, ignored) = page(&env, "?verdict=ignored").await;
    assert_eq!(rows(&ignored), 1);
    assert!(
        ignored.contains("no app follows repository demo/nobody"),
        "{ignored}"
    );
    let (_, none) = page(&env, "?source=local").await;
    assert_eq!(rows(&none), 0);
    assert_eq!(page(&env, "?verdict=bogus").await.0, 400);
    assert_eq!(page(&env, "?before=not-an-id").await.0, 400);

    // A page at a time: the first page of one links to the next, which holds the other.
    let (_, first) = page(&env, "?limit=1").await;
    assert_eq!(rows(&first), 1);
    let link = first
        .split("href=\"/deliveries?")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to older deliveries")
        .replace("&amp;", "&");
    let (_, second) = page(&env, &format!("?limit=1&{link}")).await;
    assert_eq!(rows(&second), 1);
    let id_of = |html: &str| {
        html.split("class=\"delivery\"")
            .next()
            .and_then(|h| h.rsplit("id=\"").next())
            .map(|s| s[..36].to_owned())
            .unwrap()
    };
    assert_ne!(id_of(&first), id_of(&second));

    // Redelivery: refused without the admin token, stored as a new row with it.
    let original: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM deliveries WHERE verdict = 'queued'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    let path = format!("/deliveries/{original}/redeliver");
    let url = env.pier_url(&path);
    let a = post_anonymous(&url, "", &[("Authorization", "Bearer wrong")]).await;
    assert_eq!(a.status, 401);
    let a = post_anonymous(&url, "", &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    assert_eq!(count(&env, "SELECT count(*) FROM deliveries").await, 2);
    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    let token = admin.form_token("/deliveries").await;
    let a = admin.post(&path, &[("form_token", &token)], &[]).await;
    assert_eq!(a.status, 303, "redirected to the deliveries page: {a:?}");
    let (of, verdict): (Option<uuid::Uuid>, String) = sqlx::query_as(
        "SELECT redelivery_of, verdict FROM deliveries ORDER BY received_at DESC LIMIT 1",
    )
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(of, Some(original));
    assert_eq!(verdict, "queued");
    let (_, redelivered) = page(&env, "?verdict=redelivery").await;
    assert_eq!(rows(&redelivered), 1);
    assert!(redelivered.contains(&format!("redelivery of <a href=\"#{original}\"")));
    // The redelivery ran intake again: the digest already serves, so its deployment ends
    // as a no-op and the same container keeps serving.
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["resolved_digest"], v1.as_str());
    assert_eq!(env.running_digests_of(env.app()).await, vec![v1]);
    env.cleanup().await;
}
