//! A volume Pier did not make is never the app's. A deploy that finds a
//! hand-made `pier-<app>-<name>` is refused without recording it as the app's, and a record
//! alone (whoever wrote it) never lets `pier volumes rm` delete a volume whose labels do not
//! carry that record's provenance. Real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// A volume made by hand, as an operator would, removed (with its data) whatever happens
/// to the test.
struct HandMadeVolume(String);

impl HandMadeVolume {
    fn create(name: &str) -> Self {
        let (ok, out) = docker_cli(&["volume", "create", "--label", "made-by=hand", name]);
        assert!(ok, "{out}");
        Self(name.to_owned())
    }

    fn exists(&self) -> bool {
        docker_cli(&["volume", "inspect", &self.0]).0
    }

    /// Runs busybox `sh -c script` in a throwaway container of `image` with the volume
    /// on /d.
    fn sh(&self, image: &str, script: &str) -> String {
        let mount = format!("{}:/d", self.0);
        let (ok, out) = docker_cli(&[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/busybox",
            "-v",
            &mount,
            image,
            "sh",
            "-c",
            script,
        ]);
        assert!(ok, "{out}");
        out
    }
}

impl Drop for HandMadeVolume {
    fn drop(&mut self) {
        let _ = docker_cli(&["volume", "rm", "-f", &self.0]);
    }
}

/// Removes the image a test pulled (a version of its own), whatever happens to the test.
/// Declared before the volume's guard, so dropped after it (the throwaway containers that
/// wrote to the volume are `--rm`: none holds the image then).
struct PulledImage(String);

impl Drop for PulledImage {
    fn drop(&mut self) {
        let _ = docker_cli(&["rmi", &self.0]);
    }
}

async fn records_of(env: &TestEnv, volume: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM volumes WHERE name = $1")
        .bind(volume)
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_hand_made_volume_is_refused_and_never_recorded_as_the_apps() {
    let env = TestEnv::builder()
        .without_notifications()
        .app(|a| a.extra_toml = "volumes = [{ name = \"data\", target = \"/www/data\" }]".into())
        .start()
        .await;
    let app = env.app().to_owned();
    let name = format!("pier-{app}-data");
    // A version of its own: removing its image at the end cannot touch another test's.
    let version = format!("v1-{}", random_hex(8));
    let digest = env.push(&TestImage::healthy(&version), "main").await;
    let image = format!("{}@{digest}", env.image());
    let (ok, out) = docker_cli(&["pull", &image]);
    assert!(ok, "{out}");
    let _image = PulledImage(image.clone());
    // Someone's data, in a volume that has the name Pier would give the app's.
    let hand = HandMadeVolume::create(&name);
    hand.sh(&image, "echo precious > /d/note");

    let auth = format!("Bearer {}", env.admin_token);
    let queued = http_post(
        &env.pier_url(&format!("/api/apps/{app}/deploy")),
        &[("authorization", &auth)],
        "",
    )
    .await;
    assert!(queued.as_ref().is_some_and(|r| r.0 < 300), "{queued:?}");
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("volumes:") && error.contains("not made by Pier"),
        "{error}"
    );
    assert!(env.engine.containers_of_app(&app).await.is_empty());

    // Nothing records it as the app's: not listed, and `rm` refuses it.
    assert_eq!(records_of(&env, &name).await, 0);
    let (ok, listed) = env.pier().cli_text(&["volumes"]).await;
    assert!(ok, "{listed}");
    assert!(!listed.contains(&name), "listed as the app's: {listed}");
    let (ok, rm) = env.pier().cli_text(&["volumes", "rm", &name]).await;
    assert!(!ok, "{rm}");
    assert!(rm.contains("not recorded as Pier's"), "{rm}");
    assert!(hand.exists());
    assert_eq!(hand.sh(&image, "cat /d/note"), "precious\n");

    // A record that names it anyway (one an earlier Pier wrote, or the app's own volume
    // replaced by hand since): listed as not Pier's, and `rm` still deletes nothing.
    sqlx::query(
        "INSERT INTO volumes (target, name, app, incarnation, service, deployment_id)
         VALUES ('local', $1, $2, gen_random_uuid(), 'app', NULL)",
    )
    .bind(&name)
    .bind(&app)
    .execute(&env.db.pool)
    .await
    .unwrap();
    let (ok, listed) = env.pier().cli_text(&["volumes"]).await;
    assert!(ok, "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&name) && l.contains("NOT made by Pier")),
        "{listed}"
    );
    let (ok, rm) = env.pier().cli_text(&["volumes", "rm", &name]).await;
    assert!(!ok, "{rm}");
    assert!(rm.contains("nothing was removed"), "{rm}");
    assert!(hand.exists());
    assert_eq!(hand.sh(&image, "cat /d/note"), "precious\n");
    assert_eq!(records_of(&env, &name).await, 1);

    drop(hand);
    env.cleanup().await;
}

/// Pier dies between the ownership record and the volume create; meanwhile someone makes
/// the volume by hand. The resumed step finds it without the record's labels: it refuses
/// it and undoes the record its own deployment wrote, so that the volume is not the app's;
/// a crash right after that undo replays to the same refusal.
#[tokio::test]
async fn a_volume_made_by_hand_after_a_crash_between_record_and_create_loses_that_record() {
    let mut env = TestEnv::builder()
        .lease("3s")
        .pier_env("PIER_CRASH_AT", "volume_owner:after")
        .app(|a| a.extra_toml = "volumes = [{ name = \"data\", target = \"/www/data\" }]".into())
        .start()
        .await;
    let app = env.app().to_owned();
    let name = format!("pier-{app}-data");
    let version = format!("v1-{}", random_hex(8));
    let digest = env.push(&TestImage::healthy(&version), "main").await;
    let pier = env.pier_mut();
    wait_until("pier aborts between record and create", DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(env.pier().log().contains("PIER_CRASH_AT"));
    assert_eq!(records_of(&env, &name).await, 1, "the record comes first");

    let image = format!("{}@{digest}", env.image());
    let (ok, out) = docker_cli(&["pull", &image]);
    assert!(ok, "{out}");
    let _image = PulledImage(image.clone());
    let hand = HandMadeVolume::create(&name);
    hand.sh(&image, "echo precious > /d/note");
    // The resumed step dies again, right after it undid the record.
    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "volume_unclaim:after"))
        .await;
    let pier = env.pier_mut();
    wait_until("pier aborts after the undo", DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert_eq!(
        records_of(&env, &name).await,
        0,
        "the record was not undone"
    );
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert!(
        d["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("volumes:") && e.contains("not made by Pier")),
        "{d:#}"
    );
    assert_eq!(
        records_of(&env, &name).await,
        0,
        "the record was not undone"
    );
    let (ok, rm) = env.pier().cli_text(&["volumes", "rm", &name]).await;
    assert!(!ok, "{rm}");
    assert_eq!(hand.sh(&image, "cat /d/note"), "precious\n");
    drop(hand);
    env.cleanup().await;
}
