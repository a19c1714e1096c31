//! An app removed from the config and a different app added later under the same name
//! never inherits the old one's volumes: once the old app's containers are gone its
//! incarnation ends, the new app gets new, empty volumes, and `pier volumes adopt` hands
//! the old data over only when an operator asks. Real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);

/// The volume mounted at /www/data in the app's one container.
fn mounted_volume(app: &str) -> String {
    let ids = containers_of(app);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let (ok, out) = docker_cli(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{if eq .Destination \"/www/data\"}}{{.Name}}{{end}}{{end}}",
        &ids[0],
    ]);
    assert!(ok, "{out}");
    out.trim().to_owned()
}

/// Pushes `version` and waits for its deployment to succeed; `done` holds the ids of the
/// earlier ones (each call adds its own).
async fn deploy(env: &TestEnv, version: &str, done: &mut Vec<String>) {
    let digest = env.push(&TestImage::healthy(version), "main").await;
    let not: Vec<&str> = done.iter().map(String::as_str).collect();
    let d = env.latest_final_of(env.app(), &not, DEPLOY).await;
    done.push(d["id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(d["resolved_digest"], digest.as_str(), "{d:#}");
    assert_eq!(d["state"], "succeeded", "{d:#}");
    env.wait_app_version(version, DEPLOY).await;
}

async fn note(env: &TestEnv) -> Option<(u16, String)> {
    http_get(&env.app_url("/data/note")).await
}

/// One incarnation of an app: its id, whether it is live, when it began.
type Incarnation = (uuid::Uuid, bool, chrono::DateTime<chrono::Utc>);

/// Every incarnation of `app`, in the order they began.
async fn incarnations(env: &TestEnv, app: &str) -> Vec<Incarnation> {
    sqlx::query_as(
        "SELECT incarnation, false, created_at FROM ended_incarnations WHERE app = $1
         UNION ALL SELECT incarnation, true, created_at FROM app_incarnations WHERE app = $1
         ORDER BY 3",
    )
    .bind(app)
    .fetch_all(&env.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn an_app_added_again_under_its_name_gets_new_volumes_until_it_adopts_the_old_ones() {
    let env = TestEnv::builder()
        .server_toml("sweep_interval = \"1s\"")
        .app(|a| a.extra_toml = "volumes = [{ name = \"data\", target = \"/www/data\" }]".into())
        .start()
        .await;
    let app = env.app().to_owned();
    let plain = format!("pier-{app}-data");
    let mut done = Vec::new();
    deploy(&env, "v1", &mut done).await;
    assert_eq!(mounted_volume(&app), plain);
    let first = containers_of(&app);
    let (ok, out) = docker_cli(&[
        "exec",
        &first[0],
        "/bin/busybox",
        "sh",
        "-c",
        "echo first-life > /www/data/note",
    ]);
    assert!(ok, "{out}");
    assert_eq!(note(&env).await, Some((200, "first-life\n".into())));

    // The app leaves the config. Its container stays (Pier never removes what an app that
    // left runs), and so does its incarnation, until the operator removes the container.
    let start = env.config_text();
    env.reload(&without_app(&start, &app), 1, DEPLOY).await;
    let (ok, out) = docker_cli(&["rm", "-f", &first[0]]);
    assert!(ok, "{out}");
    wait_until("the sweep ends the incarnation", DEPLOY, || async {
        let all = incarnations(&env, &app).await;
        (all.len() == 1 && !all[0].1).then_some(())
    })
    .await;
    let action: String = sqlx::query_scalar(
        "SELECT detail FROM reconcile_actions WHERE app = $1 AND action = 'ended_incarnation'",
    )
    .bind(&app)
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert!(action.contains("left the config"), "{action}");

    // A different app under the same name: a new incarnation, a new and empty volume.
    env.reload(&start, 2, DEPLOY).await;
    deploy(&env, "v2", &mut done).await;
    let all = incarnations(&env, &app).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[1].1, "the new incarnation is live: {all:?}");
    let fresh = format!("{plain}.{}", &all[1].0.simple().to_string()[..8]);
    assert_eq!(mounted_volume(&app), fresh);
    assert_eq!(note(&env).await.map(|r| r.0), Some(404), "no old data");
    let (ok, out) = docker_cli(&["volume", "inspect", &plain]);
    assert!(ok, "the old volume and its data are kept: {out}");
    let (_, listed) = env.pier().cli_text(&["volumes"]).await;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&plain) && l.contains("ended")),
        "{listed}"
    );

    // The operator wants the old data: adopt, then the next deployment mounts it.
    let (ok, out) = env.pier().cli_text(&["volumes", "adopt", &plain]).await;
    assert!(ok && out.contains("now belongs to app"), "{out}");
    let (ok, out) = env
        .pier()
        .cli_text(&["volumes", "adopt", "pier-nobody-data"])
        .await;
    assert!(!ok && out.contains("not recorded"), "{out}");
    deploy(&env, "v3", &mut done).await;
    assert_eq!(mounted_volume(&app), plain);
    assert_eq!(note(&env).await, Some((200, "first-life\n".into())));
    env.cleanup().await;
}
