//! Host files and binds reach a container only while the admin policy allows
//! them, as the live config says right before each engine change; a reload (SIGHUP,
//! `pier reload`) is checked whole; an engine error never shows a host path.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

fn volumes_of(app: &str) -> Vec<String> {
    let (_, out) = docker_cli(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=pier.app={app}"),
    ]);
    out.lines().map(str::to_owned).collect()
}

struct HostDir(std::path::PathBuf);

impl HostDir {
    fn new() -> Self {
        let d = std::env::temp_dir().join(format!("pier-host-{}", random_hex(8)));
        std::fs::create_dir_all(d.join("data")).unwrap();
        std::fs::write(d.join("app.conf"), "mode=blue\n").unwrap();
        Self(d)
    }
    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An app with a read-only config file, a bind and a volume, allowed by the policy.
async fn env_with_host_paths(host: &HostDir, pier_env: &[(&str, &str)]) -> TestEnv {
    let dir = host.path();
    let mut app = AppSpec::new("pol");
    app.extra_toml = format!(
        "files = [{{ source = \"{dir}/app.conf\", target = \"/www/app.conf\" }}]\n\
         binds = [{{ source = \"{dir}/data\", target = \"/www/data\", read_only = true }}]\n\
         volumes = [{{ name = \"cache\", target = \"/cache\" }}]"
    );
    let mut b = TestEnv::builder()
        .app(|a| *a = app.clone())
        .sources_toml(&format!(
            "[policy.host_paths]\n{} = [\"{dir}\"]\n",
            app.name
        ));
    for (k, v) in pier_env {
        b = b.pier_env(k, v);
    }
    b.start().await
}

/// The running config with the app's policy entry emptied and a volume that does not
/// exist yet added, so that "nothing was made" can be seen.
fn revoked(env: &TestEnv, host: &HostDir) -> String {
    let dir = host.path();
    let app = env.app();
    std::fs::read_to_string(env.pier().config_path())
        .unwrap()
        .replace(&format!("{app} = [\"{dir}\"]"), &format!("{app} = []"))
        .replace(
            "{ name = \"cache\", target = \"/cache\" }",
            "{ name = \"cache\", target = \"/cache\" }, { name = \"fresh\", target = \"/fresh\" }",
        )
}

async fn assert_refused_before_anything_was_made(
    env: &TestEnv,
    host: &HostDir,
    d: &serde_json::Value,
) {
    let app = env.app();
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("refused by policy"), "{error}");
    // v1 still serves, alone; no container, volume or ownership record was made.
    assert_eq!(env.engine.containers_of_app(app).await.len(), 1);
    assert_eq!(volumes_of(app), vec![format!("pier-{app}-cache")]);
    let owned: i64 = sqlx::query_scalar("SELECT count(*) FROM volumes WHERE name = $1")
        .bind(format!("pier-{app}-fresh"))
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(owned, 0);
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    // No host path in what Pier shows or logs.
    let (_, api) = env
        .api_get(&format!("/deployments/{}", d["id"].as_str().unwrap()))
        .await;
    let page = http_get(&env.pier_url(&format!("/deployments/{}", d["id"].as_str().unwrap())))
        .await
        .unwrap()
        .1;
    for (what, text) in [
        ("api", api.to_string()),
        ("page", page),
        ("log", env.pier().log()),
    ] {
        assert!(!text.contains(&host.path()), "a host path is in the {what}");
    }
}

#[tokio::test]
async fn a_bind_revoked_by_a_reload_fails_the_next_deployment_before_anything_is_made() {
    let host = HostDir::new();
    let env = env_with_host_paths(&host, &[]).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    // The config file is mounted read-only.
    assert_eq!(
        http_get(&env.app_url("/app.conf")).await,
        Some((200, "mode=blue\n".to_owned()))
    );
    let c = env.engine.containers_of_app(&app).await[0]
        .id
        .clone()
        .unwrap();
    let (ok, _) = docker_cli(&[
        "exec",
        &c,
        "/bin/busybox",
        "sh",
        "-c",
        "echo x > /www/app.conf",
    ]);
    assert!(!ok, "the config file is read-only");

    // An invalid file changes nothing: the error is logged and shown on the status page.
    let path = env.pier().config_path();
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, good.replace("port = 8080", "port = \"eighty\"")).unwrap();
    let pid = env.pier().pid().unwrap().to_string();
    let out = env.pier().run_cli(&["reload", "--pid", &pid]).await;
    assert!(!out.status.success(), "pier reload checks the file first");
    let kill = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    env.pier()
        .wait_for_log("configuration reload refused", DEPLOY)
        .await;
    let index = http_get(&env.pier_url("/")).await.unwrap().1;
    assert!(index.contains("Configuration reload refused"), "{index}");

    // The policy no longer allows the app's host paths: `pier reload` takes it.
    std::fs::write(&path, &good).unwrap();
    std::fs::write(&path, revoked(&env, &host)).unwrap();
    let out = env.pier().run_cli(&["reload", "--pid", &pid]).await;
    assert!(out.status.success(), "{out:?}");
    env.pier()
        .wait_for_log("configuration reloaded", DEPLOY)
        .await;
    let index = http_get(&env.pier_url("/")).await.unwrap().1;
    assert!(!index.contains("Configuration reload refused"));

    env.push(&TestImage::healthy("v2"), "main").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_refused_before_anything_was_made(&env, &host, &d2).await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_deployment_queued_under_the_old_policy_and_resumed_under_a_stricter_one_makes_nothing() {
    let host = HostDir::new();
    let mut env = env_with_host_paths(&host, &[]).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");

    // v2 is queued and verified under the old policy; Pier dies right there.
    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "verify:after"))
        .await;
    env.push(&TestImage::healthy("v2"), "main").await;
    let pier = env.pier_mut();
    wait_until("pier aborts after verify", DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    // The admin revokes the bind; the next Pier resumes v2 under the new policy.
    std::fs::write(env.pier().config_path(), revoked(&env, &host)).unwrap();
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_refused_before_anything_was_made(&env, &host, &d2).await;
    env.cleanup().await;
}

#[tokio::test]
async fn an_engine_error_for_a_container_with_host_mounts_names_no_host_path() {
    let host = HostDir::new();
    let dir = host.path();
    let mut app = AppSpec::new("mnt");
    // A file mounted over a directory of the image: the engine refuses it, quoting the path.
    app.extra_toml = format!("files = [{{ source = \"{dir}/app.conf\", target = \"/www\" }}]");
    let env = TestEnv::builder()
        .app(|a| *a = app.clone())
        .sources_toml(&format!(
            "[policy.host_paths]\n{} = [\"{dir}\"]\n",
            app.name
        ))
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let id = d["id"].as_str().unwrap();
    let (_, api) = env.api_get(&format!("/deployments/{id}")).await;
    let page = http_get(&env.pier_url(&format!("/deployments/{id}")))
        .await
        .unwrap()
        .1;
    assert!(api.to_string().contains("details withheld"), "{api:#}");
    for (what, text) in [
        ("api", api.to_string()),
        ("page", page),
        ("log", env.pier().log()),
    ] {
        assert!(!text.contains(&dir), "a host path is in the {what}");
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_health_check_that_requires_json_fields_fails_a_version_whose_body_lacks_them() {
    let host = HostDir::new();
    let dir = host.path();
    std::fs::write(
        host.0.join("status.json"),
        r#"{"status":"UP","db":{"ok":true}}"#,
    )
    .unwrap();
    let mut app = AppSpec::new("json");
    app.health_timeout = None;
    app.extra_toml = format!(
        "files = [{{ source = \"{dir}/status.json\", target = \"/www/status.json\" }}]\n\
         health = {{ path = \"/status.json\", timeout = \"5s\", json = {{ status = \"UP\", \"db.ok\" = \"true\" }} }}"
    );
    let env = TestEnv::builder()
        .app(|a| *a = app.clone())
        .sources_toml(&format!(
            "[policy.host_paths]\n{} = [\"{dir}\"]\n",
            app.name
        ))
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let d1 = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    assert!(
        d1["outcome"]
            .as_str()
            .unwrap()
            .contains("required JSON fields"),
        "{d1:#}"
    );

    // The app now answers 200 with "DOWN": not healthy; v1 is started again.
    std::fs::write(
        host.0.join("status.json"),
        r#"{"status":"DOWN","db":{"ok":true}}"#,
    )
    .unwrap();
    env.push(&TestImage::healthy("v2"), "main").await;
    let d2 = env
        .latest_final_of(env.app(), &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    let error = d2["error"].as_str().unwrap();
    assert!(
        error.starts_with("health:") && error.contains("`status` is not \"UP\""),
        "{error}"
    );
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn publish_on_every_interface_is_refused_at_load_and_warned_on_the_page_when_meant() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let start = env.config_text();
    let loopback = format!("publish = \"127.0.0.1:{}\"", env.apps[0].publish_port);
    assert!(start.contains(&loopback), "{start}");
    let public = start.replace(
        &loopback,
        &format!("publish = \"0.0.0.0:{}\"", env.apps[0].publish_port),
    );

    // Refused by the load itself: `pier reload` checks the file before signalling anyone.
    let bad = env.pier().config_path().with_extension("public.toml");
    std::fs::write(&bad, &public).unwrap();
    let pid = env.pier().pid().unwrap().to_string();
    let out = run_pier_cli(&bad, &["reload", "--pid", &pid]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains(&format!("app `{app}`")) && stderr.contains("publish_public = true"),
        "the error names the app and the field: {stderr}"
    );
    let (_, page) = http_get(&env.pier_url(&format!("/apps/{app}")))
        .await
        .unwrap();
    assert!(!page.contains("publish-warning"), "{page}");

    // Meant: accepted, and the page and the API say what it means.
    let meant = public.replace(
        &format!("name = \"{app}\"\n"),
        &format!("name = \"{app}\"\npublish_public = true\n"),
    );
    assert_ne!(meant, public);
    env.reload(&meant, 1, DEPLOY).await;
    let (status, page) = http_get(&env.pier_url(&format!("/apps/{app}")))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(
        page.contains("publish-warning") && page.contains("every interface"),
        "{page}"
    );
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let warnings = view["warnings"].as_array().expect("warnings in the API");
    assert_eq!(warnings.len(), 1, "{view:#}");
    assert!(
        warnings[0].as_str().unwrap().contains("0.0.0.0"),
        "{view:#}"
    );
    env.cleanup().await;
}
