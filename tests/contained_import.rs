//! Issue 10: `pier import APP ARCHIVE.tar` deploys from a docker-save archive through the
//! journaled pipeline; an archive whose image id or platform is not the expected one
//! deploys nothing.

mod support;

use std::time::Duration;

use support::*;

const DEPLOY: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_archive_deploys_only_when_its_image_id_and_platform_are_the_expected_ones() {
    let env = TestEnv::builder().without_notifications().start().await;
    let app = env.app().to_owned();
    // An archive of v1, made on a connected machine; the engine then forgets the image.
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let reference = format!("{}@{digest}", env.image());
    let (ok, out) = docker_cli(&["pull", &reference]);
    assert!(ok, "{out}");
    let (ok, id) = docker_cli(&["image", "inspect", "--format", "{{.Id}}", &reference]);
    assert!(ok, "{id}");
    let id = id.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("v1.tar");
    let archive_s = archive.to_string_lossy().into_owned();
    let (ok, out) = docker_cli(&["save", "-o", &archive_s, &reference]);
    assert!(ok, "{out}");
    let (ok, out) = docker_cli(&["rmi", "-f", &id]);
    assert!(ok, "{out}");

    let wrong = format!("sha256:{}", "0".repeat(64));
    import(&env, &app, &archive_s, &["--digest", &wrong]).await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert!(
        d["error"].as_str().unwrap().contains("digest mismatch"),
        "{d:#}"
    );
    nothing_made(&env, &app, "wrong id").await;

    import(
        &env,
        &app,
        &archive_s,
        &["--digest", &id, "--platform", "linux/arm64"],
    )
    .await;
    let d2 = env
        .latest_final_of(&app, &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    assert!(
        d2["error"].as_str().unwrap().contains("platform mismatch"),
        "{d2:#}"
    );
    nothing_made(&env, &app, "wrong platform").await;

    import(&env, &app, &archive_s, &["--digest", &id]).await;
    let d3 = env
        .latest_final_of(
            &app,
            &[d["id"].as_str().unwrap(), d2["id"].as_str().unwrap()],
            DEPLOY,
        )
        .await;
    assert_eq!(d3["state"], "succeeded", "{d3:#}");
    assert_eq!(d3["resolved_digest"], id.as_str());
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let steps: Vec<String> = env
        .deployment_final(d3["id"].as_str().unwrap(), DEPLOY)
        .await["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        steps,
        [
            "resolve", "network", "create", "stop_old", "start", "health", "switch", "retire"
        ]
    );
    env.cleanup().await;
}

async fn import(env: &TestEnv, app: &str, archive: &str, args: &[&str]) {
    let mut all = vec!["import", app, archive];
    all.extend_from_slice(args);
    let out = env.pier().run_cli(&all).await;
    assert!(out.status.success(), "{out:?}");
}

async fn nothing_made(env: &TestEnv, app: &str, what: &str) {
    assert!(
        env.engine.containers_of_app(app).await.is_empty(),
        "{what}: a container was made"
    );
    assert!(
        !docker_cli(&["network", "inspect", &format!("pier-{app}")]).0,
        "{what}: the network was made"
    );
}
