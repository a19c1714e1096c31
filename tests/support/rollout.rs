//! A fleet for the rollout tests: the host's engine (`local`) and two extra real engines in
//! network namespaces, `e2` over TLS and `e3` over SSH, each pulling from the test registry
//! under the same image name; one app on all three. With [`FleetSpec::proxies`], each
//! remote host also runs its own `pier proxy --target`, which sends that engine's HTTP
//! health probes (its app publishes on that host's loopback, which Pier cannot reach).

use super::*;
use serde_json::Value;

/// What a deployment across three engines may take on a loaded machine.
pub const FLEET_DEPLOY: Duration = Duration::from_secs(180);

pub struct FleetSpec {
    /// The app's `rollout.batch`.
    pub batch: &'static str,
    /// The app's `rollout.pause` between batches.
    pub pause: &'static str,
    /// `server.retry_budget`.
    pub retry_budget: &'static str,
    /// More `dockerd` arguments for the third engine (`e3`): a host configured unlike the
    /// others.
    pub third_dockerd_args: Vec<&'static str>,
    /// Pier's lease: short, so that a restarted Pier takes over a killed one's deployment.
    pub lease: &'static str,
    /// A `pier proxy --target e2` and `--target e3` on each remote host (their namespaces
    /// then also reach Postgres), as an app with HTTP health on remote engines needs.
    pub proxies: bool,
    /// More lines of the app's table, after `targets` and `rollout` (e.g. `health = {
    /// path = "/health", timeout = "10s" }`); without a `health`, every engine checks the
    /// image's HEALTHCHECK.
    pub app_toml: String,
    /// Blue-green: the `[apps.route]` lines (e.g. `soak = "2s"`); every host then runs a
    /// `pier proxy` (this one's serves `local`), and `version_on` asks through it.
    pub route: Option<&'static str>,
}

impl Default for FleetSpec {
    fn default() -> Self {
        FleetSpec {
            batch: "1",
            pause: "0s",
            retry_budget: "30s",
            third_dockerd_args: Vec::new(),
            lease: "3s",
            proxies: false,
            app_toml: String::new(),
            route: None,
        }
    }
}

pub struct Fleet {
    pub env: TestEnv,
    /// Each remote host's `pier proxy --target`, by target; declared before `remotes` so
    /// that, dropped on a panic, they stop before their namespaces go.
    proxies: Vec<(&'static str, PierProcess)>,
    /// `e2` (TLS) and `e3` (SSH), in the app's target order.
    remotes: Vec<(&'static str, ExtraEngine)>,
    /// The deployments [`Fleet::final_deployment`] returned.
    returned: std::sync::Mutex<Vec<String>>,
}

impl Fleet {
    /// The engines first (they forward the registry's port, and with proxies the
    /// database's, into their namespaces), then the environment whose config names them,
    /// then the proxies. Without `app_toml`'s `health`, the image's HEALTHCHECK is what
    /// every engine checks.
    pub async fn start(spec: FleetSpec) -> Fleet {
        let registry_port = free_port();
        let mut forwards = vec![registry_port];
        let proxied = spec.proxies || spec.route.is_some();
        if proxied {
            let db = reqwest::Url::parse(&base_database_url()).expect("a database URL");
            forwards.push(db.port().unwrap_or(5432));
        }
        let e2 = ExtraEngine::builder().forwards(&forwards).start().await;
        let e3 = ExtraEngine::builder()
            .ssh()
            .forwards(&forwards)
            .dockerd_args(&spec.third_dockerd_args)
            .start()
            .await;
        let targets = format!("{}{}", e2.tls_target_toml("e2"), e3.ssh_target_toml("e3"));
        let (batch, pause, app_toml) = (spec.batch, spec.pause, spec.app_toml);
        let env = TestEnv::builder()
            .registry_port(registry_port)
            .lease(spec.lease)
            .server_toml(&format!("retry_budget = \"{}\"", spec.retry_budget))
            .no_health()
            .sources_toml(&targets)
            .app(|a| {
                a.extra_toml = format!(
                    "targets = [\"local\", \"e2\", \"e3\"]\nrollout = {{ batch = {batch}, pause = \"{pause}\" }}\n\
                     {app_toml}"
                );
                if let Some(route) = spec.route {
                    a.blue_green(route);
                }
            })
            .start()
            .await;
        let mut proxies = Vec::new();
        if spec.route.is_some() {
            proxies.push(("local", env.start_proxy().await));
        }
        if proxied {
            proxies.push(("e2", e2.start_proxy(&env, "e2").await));
            proxies.push(("e3", e3.start_proxy(&env, "e3").await));
        }
        Fleet {
            env,
            proxies,
            remotes: vec![("e2", e2), ("e3", e3)],
            returned: Default::default(),
        }
    }

    /// The pid of the `pier proxy --target` on `target`'s host (the pid its probe results
    /// name).
    pub fn proxy_pid(&self, target: &str) -> u32 {
        self.proxies
            .iter()
            .find(|(n, _)| *n == target)
            .and_then(|(_, p)| p.pid())
            .unwrap_or_else(|| panic!("no pier proxy runs for {target}: FleetSpec.proxies"))
    }

    pub fn remote(&self, name: &str) -> &ExtraEngine {
        &self
            .remotes
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a remote engine of the fleet")
            .1
    }

    pub fn remote_mut(&mut self, name: &str) -> &mut ExtraEngine {
        &mut self
            .remotes
            .iter_mut()
            .find(|(n, _)| *n == name)
            .expect("a remote engine of the fleet")
            .1
    }

    /// The test-side client of one engine of the fleet.
    pub async fn engine(&self, target: &str) -> Engine {
        if target == "local" {
            return self.env.engine.clone();
        }
        let (_, remote) = self
            .remotes
            .iter()
            .find(|(n, _)| *n == target)
            .expect("a remote engine of the fleet");
        Engine {
            docker: remote.client().await,
        }
    }

    /// The newest deployment of the app that this method has not returned before, once
    /// final: after a push, the deployment it queued, never the previous one that is
    /// still the newest until the registry's notification arrives (a race a loaded
    /// machine loses).
    pub async fn final_deployment(&self) -> Value {
        self.env
            .next_final_deployment(&self.returned, FLEET_DEPLOY)
            .await
    }

    /// Every engine runs exactly one container of the app, at `digest`, whose health check
    /// answers on that engine's own host (`/version` says `version`). The container ids, in
    /// target order.
    pub async fn assert_serving(&self, digest: &str, version: &str) -> Vec<String> {
        self.assert_serving_on(&["local", "e2", "e3"], digest, version)
            .await
    }

    pub async fn assert_serving_on(
        &self,
        targets: &[&str],
        digest: &str,
        version: &str,
    ) -> Vec<String> {
        let mut ids = Vec::new();
        for target in targets {
            let all = self
                .engine(target)
                .await
                .containers_of_app(self.env.app())
                .await;
            assert_eq!(all.len(), 1, "{target}: one container of the app: {all:#?}");
            let c = &all[0];
            let labels = c.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("pier.digest").map(String::as_str),
                Some(digest),
                "{target}: {c:#?}"
            );
            assert_eq!(
                c.state.as_ref().map(|s| s.to_string()).as_deref(),
                Some("running"),
                "{target}: {c:#?}"
            );
            assert_eq!(
                self.version_on(target).await.as_deref(),
                Some(version),
                "{target} answers on its own host"
            );
            ids.push(c.id.clone().unwrap_or_default());
        }
        ids
    }

    /// `GET /version` of the app on `target`'s own loopback.
    pub async fn version_on(&self, target: &str) -> Option<String> {
        let port = self.env.publish().port();
        if target == "local" {
            return http_get(&self.env.app_url("/version"))
                .await
                .filter(|(code, _)| *code == 200)
                .map(|(_, body)| body.trim().to_owned());
        }
        let (_, remote) = self.remotes.iter().find(|(n, _)| *n == target)?;
        // Through that host's proxy (blue-green) or from the app's own publish.
        remote
            .curl_inside(port, "/version")
            .await
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body.trim().to_owned())
    }

    /// The digest of the app's serving generation on `target`, as the database has it.
    pub async fn serving_generation(&self, target: &str) -> Option<String> {
        sqlx::query_scalar("SELECT digest FROM app_generations WHERE app = $1 AND target = $2")
            .bind(self.env.app())
            .bind(target)
            .fetch_optional(&self.env.db.pool)
            .await
            .expect("read app_generations")
    }

    /// Pier first (so it changes nothing more), then the proxies, then every engine's
    /// containers.
    pub async fn cleanup(mut self) {
        if let Some(p) = self.env.pier.as_mut() {
            p.kill();
        }
        // The proxies before their engines: one must not outlive its namespace.
        for (_, proxy) in &mut self.proxies {
            proxy.kill();
        }
        for (_, remote) in &mut self.remotes {
            remote.cleanup();
        }
        self.env.cleanup().await;
    }
}

/// The journal entries of a final deployment, as the API has them.
pub fn steps(d: &Value) -> impl Iterator<Item = &Value> {
    d["steps"].as_array().into_iter().flatten()
}

pub fn find_step<'a>(d: &'a Value, step: &str, target: &str) -> Option<&'a Value> {
    steps(d).find(|s| {
        s["step"] == step
            && s["target"].as_str().unwrap_or_default() == target
            && s["service"].as_str().unwrap_or_default().is_empty()
    })
}

pub fn step_of<'a>(d: &'a Value, step: &str, target: &str) -> &'a Value {
    find_step(d, step, target).unwrap_or_else(|| panic!("no {step} on {target}: {d:#}"))
}

pub fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(|| panic!("a timestamp: {v}"))
}

/// After a crash at `point` (`step#target:before|after`) and the restart: `resolve` once,
/// every engine (`local`, `e2`, `e3`, whose serving containers are `running`) has each of
/// `engine_steps` once, all succeeded; only the interrupted step was replayed (when the
/// crash came before its side effect); each engine's one `create` made the container that
/// runs there, and nothing was reverted.
pub fn assert_journaled_once(d: &Value, point: &str, running: &[String], engine_steps: &[&str]) {
    let (at, when) = point.rsplit_once(':').expect("step:when");
    let resolves = steps(d).filter(|s| s["step"] == "resolve").count();
    assert_eq!(resolves, 1, "{point}: {d:#}");
    for (target, container) in ["local", "e2", "e3"].iter().zip(running) {
        for step in engine_steps {
            let s = step_of(d, step, target);
            assert_eq!(
                s["state"], "succeeded",
                "{point}: {step} on {target}: {d:#}"
            );
            let replays = s["replays"].as_i64().unwrap_or(-1);
            if at == format!("{step}#{target}") {
                let want = if when == "before" { 1 } else { 0 };
                assert_eq!(replays, want, "{point}: {step} on {target}: {s:#}");
            } else if *step == "reach" {
                // Every engine's `reach` runs at once: another engine's may have begun
                // when the process died, and is then asked again, once.
                assert!(
                    (0..=1).contains(&replays),
                    "{point}: {step} on {target}: {s:#}"
                );
            } else {
                assert_eq!(replays, 0, "{point}: {step} on {target} was redone: {s:#}");
            }
        }
        let created = step_of(d, "create", target);
        assert_eq!(
            created["result"]["id"].as_str(),
            Some(container.as_str()),
            "{point}: {target} runs the container its one create made: {created:#}"
        );
    }
    let reverts = steps(d).filter(|s| s["step"] == "revert").count();
    assert_eq!(reverts, 0, "{point}: nothing was reverted: {d:#}");
}

impl Fleet {
    /// Pushes `image` (a first version, `version` its `/version`), waits until its
    /// deployment succeeded and every engine serves it: its digest and the container ids,
    /// in target order.
    pub async fn deploy_everywhere(
        &self,
        image: &TestImage,
        version: &str,
    ) -> (String, Vec<String>) {
        let digest = self.env.push(image, "main").await;
        let d = self.final_deployment().await;
        assert_eq!(d["state"], "succeeded", "{d:#}");
        let ids = self.assert_serving(&digest, version).await;
        (digest, ids)
    }

    /// The database names `digest` as the serving generation on every engine.
    pub async fn assert_generation_everywhere(&self, digest: &str) {
        for target in ["local", "e2", "e3"] {
            assert_eq!(
                self.serving_generation(target).await.as_deref(),
                Some(digest),
                "{target}'s serving generation"
            );
        }
    }
}
