//! What runs is contained and owned. Per-app networks, shared networks, owned
//! volumes, secrets that never leave memory, hardening, and host paths only where the live
//! policy allows them. Real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

async fn inspect(id: &str) -> bollard::models::ContainerInspectResponse {
    docker().await.inspect_container(id, None).await.unwrap()
}

async fn only_container(env: &TestEnv, app: &str) -> String {
    let all = env.engine.containers_of_app(app).await;
    assert_eq!(all.len(), 1, "{all:#?}");
    all[0].id.clone().unwrap()
}

fn volumes_of(app: &str) -> Vec<String> {
    let (ok, out) = docker_cli(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=pier.app={app}"),
    ]);
    assert!(ok, "{out}");
    out.lines().map(str::to_owned).collect()
}

/// Removes a shared network the test made, whatever happens to the test.
struct SharedNetwork(String);

impl SharedNetwork {
    fn create() -> Self {
        let name = format!("shared-{}", random_hex(8));
        let (ok, out) = docker_cli(&["network", "create", &name]);
        assert!(ok, "{out}");
        Self(name)
    }
    fn members(&self) -> Vec<String> {
        let (_, out) = docker_cli(&[
            "network",
            "inspect",
            &self.0,
            "--format",
            "{{range $id, $c := .Containers}}{{$id}} {{end}}",
        ]);
        out.split_whitespace().map(str::to_owned).collect()
    }
}

impl Drop for SharedNetwork {
    fn drop(&mut self) {
        let _ = docker_cli(&["network", "rm", &self.0]);
    }
}

#[tokio::test]
async fn an_app_runs_hardened_on_its_own_network_and_joins_shared_ones_until_retired() {
    let shared = SharedNetwork::create();
    let env = TestEnv::builder()
        .app(|a| {
            a.extra_toml = format!(
                "service = \"api\"\nnetworks = [\"{}\"]\nread_only = true\ntmpfs = [\"/tmp\"]\n\
                 user = \"65534:65534\"\ncap_keep = [\"NET_BIND_SERVICE\"]\nport_env = \"PORT\"\n\
                 memory = \"64m\"",
                shared.0
            )
        })
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");

    // The private network is Pier's, labelled for this app.
    let net = docker()
        .await
        .inspect_network(&format!("pier-{app}"), None)
        .await
        .expect("the app's network exists");
    let labels = net.labels.unwrap_or_default();
    assert_eq!(labels.get("pier.managed").map(String::as_str), Some("true"));
    assert_eq!(
        labels.get("pier.app").map(String::as_str),
        Some(app.as_str())
    );

    let v1 = only_container(&env, &app).await;
    let c = inspect(&v1).await;
    let nets = c.network_settings.unwrap().networks.unwrap();
    let mut names: Vec<&String> = nets.keys().collect();
    names.sort();
    let mut want = [format!("pier-{app}"), shared.0.clone()];
    want.sort();
    assert_eq!(names, want.iter().collect::<Vec<_>>());
    let own = &nets[&format!("pier-{app}")];
    assert!(
        own.aliases
            .clone()
            .unwrap_or_default()
            .contains(&"api".to_owned()),
        "{own:#?}"
    );
    // Hardening reaches the engine.
    let host = c.host_config.unwrap();
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(host.cap_add, Some(vec!["NET_BIND_SERVICE".to_owned()]));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert!(host.tmpfs.unwrap_or_default().contains_key("/tmp"));
    assert_eq!(host.memory, Some(64 << 20));
    assert_eq!(
        host.security_opt.unwrap_or_default(),
        vec!["no-new-privileges:true".to_owned()]
    );
    let config = c.config.unwrap();
    assert_eq!(config.user.as_deref(), Some("65534:65534"));
    assert!(
        config
            .env
            .unwrap_or_default()
            .contains(&"PORT=8080".to_owned())
    );
    assert_eq!(shared.members(), vec![v1.clone()]);

    // v2 replaces v1: the retired container has left the shared network.
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    let v2 = only_container(&env, &app).await;
    assert_eq!(shared.members(), vec![v2]);
    env.cleanup().await;
}

#[tokio::test]
async fn volumes_are_owned_per_app_survive_deploys_and_are_never_shared_by_name() {
    let a = AppSpec::new("va");
    let mut b = AppSpec::new("vb");
    // `pier-<c>-data` is the same engine name as `a`'s `x-data` volume.
    let mut c = AppSpec::new("vc");
    c.name = format!("{}-x", a.name);
    c.repo = format!("demo/{}", c.name);
    let volume =
        |name: &str| format!("volumes = [{{ name = \"{name}\", target = \"/www/data\" }}]");
    let mut a = a;
    a.extra_toml = volume("x-data");
    b.extra_toml = volume("x-data");
    c.extra_toml = volume("data");
    let env = TestEnv::builder()
        .app(|first| *first = a.clone())
        .add_app(b.clone())
        .add_app(c.clone())
        .start()
        .await;

    // v1 of `a` writes into its volume; v2 reads it.
    env.registry()
        .push(&a.repo, "main", &TestImage::healthy("v1"))
        .await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&a.name, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let v1 = only_container(&env, &a.name).await;
    let (ok, out) = docker_cli(&[
        "exec",
        &v1,
        "/bin/busybox",
        "sh",
        "-c",
        "echo from-v1 > /www/data/note",
    ]);
    assert!(ok, "{out}");
    env.registry()
        .push(&a.repo, "main", &TestImage::healthy("v2"))
        .await;
    env.wait_app_version("v2", DEPLOY).await;
    assert_eq!(
        http_get(&env.app_url("/data/note")).await,
        Some((200, "from-v1\n".to_owned()))
    );
    let a_volume = format!("pier-{}-x-data", a.name);
    assert_eq!(volumes_of(&a.name), vec![a_volume.clone()]);
    let labels = docker()
        .await
        .inspect_volume(&a_volume)
        .await
        .unwrap()
        .labels;
    let owner: (String, String, String) =
        sqlx::query_as("SELECT app, incarnation::text, service FROM volumes WHERE name = $1")
            .bind(&a_volume)
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(owner.0, a.name);
    assert_eq!(labels.get("pier.incarnation"), Some(&owner.1));
    assert_eq!(labels.get("pier.service"), Some(&owner.2));

    // The same volume name in another app is another volume, with none of a's data.
    env.registry()
        .push(&b.repo, "main", &TestImage::healthy("v1"))
        .await;
    let db = env.latest_final_of(&b.name, &[], DEPLOY).await;
    assert_eq!(db["state"], "succeeded", "{db:#}");
    assert_eq!(volumes_of(&b.name), vec![format!("pier-{}-x-data", b.name)]);
    assert_eq!(
        http_get(&format!("http://{}/data/note", b.publish()))
            .await
            .map(|r| r.0),
        Some(404)
    );

    // An app whose volume would be a's (by name) is refused before anything is made.
    env.registry()
        .push(&c.repo, "main", &TestImage::healthy("v1"))
        .await;
    let dc = env.latest_final_of(&c.name, &[], DEPLOY).await;
    assert_eq!(dc["state"], "failed", "{dc:#}");
    let error = dc["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("volumes:") && error.contains(&format!("owned by app `{}`", a.name)),
        "{error}"
    );
    assert!(env.engine.containers_of_app(&c.name).await.is_empty());
    assert!(volumes_of(&c.name).is_empty());

    // Removing `a` from the config deletes nothing; `pier volumes` lists it with its owner,
    // and only `pier volumes rm` deletes it (refused while a container uses it).
    let listed = env.pier().run_cli(&["volumes"]).await;
    let text = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        text.lines()
            .any(|l| l.starts_with(&a_volume) && l.contains(&format!("app {}", a.name))),
        "{text}"
    );
    let rm = env.pier().run_cli(&["volumes", "rm", &a_volume]).await;
    assert!(!rm.status.success(), "in use: {rm:?}");
    assert_eq!(volumes_of(&a.name), vec![a_volume.clone()]);
    env.engine.remove_app_containers(&a.name).await;
    let rm = env.pier().run_cli(&["volumes", "rm", &a_volume]).await;
    assert!(rm.status.success(), "{rm:?}");
    assert!(volumes_of(&a.name).is_empty());
    env.cleanup().await;
}

/// Every page and API answer Pier gives for `app`, as text.
async fn everything_shown(env: &TestEnv, app: &str) -> String {
    let client = reqwest::Client::new();
    let mut paths = vec![
        "/".to_owned(),
        format!("/apps/{app}"),
        "/deliveries".to_owned(),
        "/api/apps".to_owned(),
        format!("/api/apps/{app}"),
    ];
    for row in env.deployment_rows(app).await {
        paths.push(format!("/deployments/{}", row.id));
        paths.push(format!("/api/deployments/{}", row.id));
    }
    let mut all = String::new();
    for p in paths {
        let r = client
            .get(env.pier_url(&p))
            .bearer_auth(&env.admin_token)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "GET {p}: {}", r.status());
        all.push_str(&r.text().await.unwrap());
    }
    all
}

fn pg_dump(url: &str) -> String {
    let out = std::process::Command::new("pg_dump")
        .args(["--data-only", url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_secret_reaches_the_container_and_nothing_else_and_a_changed_one_shows_as_a_change() {
    let secret = format!("sekrit-{}", random_hex(24));
    let env = TestEnv::builder()
        .app(|a| a.extra_toml = "secrets = { API_TOKEN = \"env:PIER_TEST_APP_SECRET\" }".into())
        .pier_env("PIER_TEST_APP_SECRET", &secret)
        .start()
        .await;
    let mut env = env;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let id = only_container(&env, &app).await;
    let vars = inspect(&id).await.config.unwrap().env.unwrap_or_default();
    assert!(vars.contains(&format!("API_TOKEN={secret}")));

    // A version that prints its environment (and the secret base64-encoded) and dies: its
    // logs are kept for the page, masked.
    env.push(&TestImage::exits_at_once("v2"), "main").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");

    let create = |d: &Value| {
        let steps = d["steps"].as_array().cloned().unwrap_or_default();
        steps
            .into_iter()
            .find(|s| s["step"] == "create")
            .map(|s| s["intent"].clone())
            .unwrap()
    };
    let first = create(
        &env.deployment_final(d1["id"].as_str().unwrap(), DEPLOY)
            .await,
    );
    assert_eq!(first["secret_names"], serde_json::json!(["API_TOKEN"]));

    let shown = everything_shown(&env, &app).await;
    let dump = pg_dump(&env.db.url);
    let log = env.pier().log();
    for (what, text) in [("pages and API", &shown), ("pg_dump", &dump), ("log", &log)] {
        assert!(!text.contains(&secret), "the secret is in the {what}");
    }
    assert!(dump.contains("API_TOKEN"), "the key is journaled");

    // A changed secret: the journal shows a change (another keyed hash), not the value.
    let changed = format!("sekrit-{}", random_hex(24));
    env.pier_mut()
        .restart_with(|c| c.env("PIER_TEST_APP_SECRET", &changed))
        .await;
    let auth = format!("Bearer {}", env.admin_token);
    let queued = http_post(
        &env.pier_url(&format!("/api/apps/{app}/deploy")),
        &[("authorization", &auth)],
        "",
    )
    .await;
    assert!(queued.as_ref().is_some_and(|r| r.0 < 300), "{queued:?}");
    let d3 = env
        .latest_final_of(
            &app,
            &[d1["id"].as_str().unwrap(), d2["id"].as_str().unwrap()],
            DEPLOY,
        )
        .await;
    let third = create(
        &env.deployment_final(d3["id"].as_str().unwrap(), DEPLOY)
            .await,
    );
    assert_ne!(first["env_hmac"], third["env_hmac"]);
    assert!(!pg_dump(&env.db.url).contains(&changed));
    env.cleanup().await;
}

#[tokio::test]
async fn a_non_root_app_can_write_its_tmpfs_tmp_even_where_the_image_has_a_0755_tmp() {
    let env = TestEnv::builder()
        .app(|a| {
            a.extra_toml = "read_only = true\nuser = \"65534:65534\"\n\
                            tmpfs = [\"/tmp\", { target = \"/run/app\", mode = \"0700\" }]"
                .to_owned()
        })
        .start()
        .await;
    let app = env.app().to_owned();
    // The image writes /tmp/probe as its first act and exits 1 if it cannot.
    env.push(&TestImage::writes_tmp("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    env.wait_app_version("v1", DEPLOY).await;

    let id = only_container(&env, &app).await;
    let tmpfs = inspect(&id).await.host_config.unwrap().tmpfs.unwrap();
    assert!(tmpfs["/tmp"].contains("mode=1777"), "{tmpfs:?}");
    assert!(tmpfs["/tmp"].contains("uid=65534,gid=65534"), "{tmpfs:?}");
    assert!(tmpfs["/run/app"].contains("mode=0700"), "{tmpfs:?}");
    // The running app's user writes both mounts; the root filesystem stays read-only.
    for dir in ["/tmp", "/run/app"] {
        let (ok, out) = docker_cli(&[
            "exec",
            &id,
            "/bin/busybox",
            "touch",
            &format!("{dir}/written"),
        ]);
        assert!(ok, "{dir}: {out}");
    }
    let (ok, _) = docker_cli(&["exec", &id, "/bin/busybox", "touch", "/www/written"]);
    assert!(!ok, "the root filesystem is read-only");
    env.cleanup().await;
}

#[tokio::test]
async fn an_image_that_runs_as_a_numeric_user_owns_its_tmpfs_tmp_without_a_user_setting() {
    let env = TestEnv::builder()
        .app(|a| a.extra_toml = "read_only = true\ntmpfs = [\"/tmp\"]".to_owned())
        .start()
        .await;
    let app = env.app().to_owned();
    // The image says USER 65534:65534 and writes /tmp/probe first (exit 1 if it cannot).
    env.push(&TestImage::writes_tmp_as_nobody("v1"), "main")
        .await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let id = only_container(&env, &app).await;
    let tmpfs = inspect(&id).await.host_config.unwrap().tmpfs.unwrap();
    assert!(
        tmpfs["/tmp"].contains("mode=1777,uid=65534,gid=65534"),
        "{tmpfs:?}"
    );
    env.cleanup().await;
}
