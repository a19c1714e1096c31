//! The whole environment of a test: database, registry, Pier, apps.

use super::*;

// ---------------------------------------------------------------------------------------------
// The whole environment
// ---------------------------------------------------------------------------------------------

/// One app in the rendered pier.toml.
#[derive(Debug, Clone)]
pub struct AppSpec {
    pub name: String,
    /// Repository inside the registry: `demo/<name>`.
    pub repo: String,
    pub tag: String,
    /// Host port that container port 8080 is published on (127.0.0.1).
    pub publish_port: u16,
    /// `None`: no `health` table at all.
    pub health_timeout: Option<Duration>,
    pub health_path: String,
    pub env: BTreeMap<String, String>,
    /// Extra TOML lines appended to the app's table verbatim (e.g. `memory = "64m"`);
    /// `@REGISTRY@` in them becomes the app's registry host.
    pub extra_toml: String,
    /// Blue-green: lines of the app's `[apps.route]` table; `publish_port` is then the
    /// proxy's listen port for the app, and the app itself publishes nothing.
    pub route_toml: Option<String>,
    /// The registry host of the app's image; `None`: the test registry.
    pub registry: Option<String>,
    /// No `publish` line (a swarm app publishes per node, see `swarm.publish_port`).
    pub no_publish: bool,
    /// The app's `ports` list (TOML) in place of `port = 8080`.
    pub ports_toml: Option<String>,
}

impl AppSpec {
    /// An app `<prefix>-<8 hex>` on repo `demo/<name>`, tag `main`, health `/health` 20 s,
    /// env `GREETING=hello`, a fresh publish port.
    pub fn new(prefix: &str) -> AppSpec {
        let name = unique_app(prefix);
        AppSpec {
            repo: format!("demo/{name}"),
            name,
            tag: "main".to_owned(),
            publish_port: free_port(),
            health_timeout: Some(Duration::from_secs(20)),
            health_path: "/health".to_owned(),
            env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
            extra_toml: String::new(),
            route_toml: None,
            registry: None,
            no_publish: false,
            ports_toml: None,
        }
    }

    /// Makes the app blue-green behind Pier's proxy on its `publish_port`, with extra
    /// `[apps.route]` lines (e.g. `soak = "3s"`).
    pub fn blue_green(&mut self, route_lines: &str) {
        self.route_toml = Some(route_lines.to_owned());
    }

    pub fn publish(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.publish_port))
    }

    fn render(&self, registry_host: &str) -> String {
        // An empty `tag` writes none (for an app with `versions = ...` in `extra_toml`).
        let tag = if self.tag.is_empty() {
            String::new()
        } else {
            format!("tag = \"{}\"\n", self.tag)
        };
        let port = match &self.ports_toml {
            Some(list) => format!("ports = {list}"),
            None => "port = 8080".to_owned(),
        };
        let mut s = format!(
            "\n[[apps]]\nname = \"{name}\"\nimage = \"{registry_host}/{repo}\"\n{tag}\
             {port}\n",
            name = self.name,
            registry_host = self.registry.as_deref().unwrap_or(registry_host),
            repo = self.repo,
        );
        match &self.route_toml {
            None if self.no_publish => {}
            None => s.push_str(&format!("publish = \"127.0.0.1:{}\"\n", self.publish_port)),
            Some(_) => s.push_str("strategy = \"blue-green\"\n"),
        }
        if let Some(t) = self.health_timeout {
            s.push_str(&format!(
                "health = {{ path = \"{}\", timeout = \"{}\" }}\n",
                self.health_path,
                humantime::format_duration(t)
            ));
        }
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(v)))
                .collect();
            s.push_str(&format!("env = {{ {} }}\n", pairs.join(", ")));
        }
        if !self.extra_toml.is_empty() {
            let host = self.registry.as_deref().unwrap_or(registry_host);
            s.push_str(self.extra_toml.replace("@REGISTRY@", host).trim_end());
            s.push('\n');
        }
        if let Some(route) = &self.route_toml {
            s.push_str(&format!(
                "[apps.route]\nlisten = \"127.0.0.1:{}\"\n{}\n",
                self.publish_port,
                route.trim_end()
            ));
        }
        s
    }
}

/// `s` as a TOML string, quoted and escaped.
pub fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Builder for [`TestEnv`].
pub struct TestEnvBuilder {
    apps: Vec<AppSpec>,
    workers: usize,
    lease: String,
    start_pier: bool,
    notify: bool,
    pier_env: Vec<(String, String)>,
    extra_server_toml: String,
    registry_auth: Option<(String, String)>,
    extra_sources_toml: String,
    /// The database server (a superuser URL) and Pier's URL for it, `{db}` standing for
    /// the database's name; `None`: the shared server, one host.
    database: Option<(String, String)>,
    /// The test registry's port; `None`: a free one.
    registry_port: Option<u16>,
    /// Another `pier` binary than this build's (a bench's baseline).
    program: Option<PathBuf>,
}

impl TestEnvBuilder {
    /// The test registry listens on `port` (chosen by the test with [`free_port`]), so that
    /// what needs its address before the environment starts (an extra engine forwarding
    /// it into its namespace) can have it.
    pub fn registry_port(mut self, port: u16) -> Self {
        self.registry_port = Some(port);
        self
    }

    /// The database on a primary and standby of the test's own; Pier is given both hosts.
    pub fn on_pair(mut self, pair: &PgPair) -> Self {
        self.database = Some((pair.primary.url("postgres"), pair.pier_url("{db}")));
        self
    }

    /// More `[[sources]]` tables, appended verbatim after the default ones; `{registry}`
    /// becomes the test registry's `127.0.0.1:PORT`.
    pub fn sources_toml(mut self, toml: &str) -> Self {
        self.extra_sources_toml.push_str(toml.trim_end());
        self.extra_sources_toml.push('\n');
        self
    }

    /// More `[[registries]]` tables (e.g. a [`HostileRegistry`]'s), appended verbatim with
    /// the extra sources: TOML takes the tables of an array in any order.
    pub fn registries_toml(self, toml: &str) -> Self {
        self.sources_toml(toml)
    }

    /// The registry demands HTTP basic auth (htpasswd); Pier gets the user in its config and
    /// the password through the environment (`env:PIER_TEST_REGISTRY_PASSWORD`).
    pub fn registry_auth(mut self, user: &str, password: &str) -> Self {
        self.registry_auth = Some((user.to_owned(), password.to_owned()));
        self.pier_env.push((
            "PIER_TEST_REGISTRY_PASSWORD".to_owned(),
            password.to_owned(),
        ));
        self
    }

    /// The first app's health timeout (default 20 s).
    pub fn health_timeout(mut self, t: Duration) -> Self {
        self.apps[0].health_timeout = Some(t);
        self
    }

    /// Drops the first app's `health` table.
    pub fn no_health(mut self) -> Self {
        self.apps[0].health_timeout = None;
        self
    }

    /// Edits the first app.
    pub fn app(mut self, change: impl FnOnce(&mut AppSpec)) -> Self {
        change(&mut self.apps[0]);
        self
    }

    /// No app at all (the builder starts with one, `web`); [`add_app`](Self::add_app) adds
    /// them back. For what a Pier costs with nothing to deploy; the methods that read the
    /// first app must not be called.
    pub fn no_apps(mut self) -> Self {
        self.apps.clear();
        self
    }

    /// Adds another app (e.g. `AppSpec::new("api")`).
    pub fn add_app(mut self, app: AppSpec) -> Self {
        self.apps.push(app);
        self
    }

    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `[server].lease`, e.g. `"5s"` (default `"10s"`).
    pub fn lease(mut self, lease: &str) -> Self {
        self.lease = lease.to_owned();
        self
    }

    /// Extra lines for the `[server]` table, e.g. `sweep_interval = "1s"`.
    pub fn server_toml(mut self, lines: &str) -> Self {
        self.extra_server_toml.push_str(lines.trim_end());
        self.extra_server_toml.push('\n');
        self
    }

    /// Runs `program` as Pier instead of this build's binary: a bench compares a baseline
    /// build (an earlier commit's) with this one in the same run.
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = Some(program.into());
        self
    }

    /// Environment for the pier process (e.g. `PIER_CRASH_AT`).
    pub fn pier_env(mut self, key: &str, value: &str) -> Self {
        self.pier_env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Do not start Pier (start it later with [`TestEnv::start_pier`]); the config is written
    /// anyway and the registry still notifies Pier's port (it retries until Pier is up).
    pub fn without_pier(mut self) -> Self {
        self.start_pier = false;
        self
    }

    /// The registry sends no notifications at all.
    pub fn without_notifications(mut self) -> Self {
        self.notify = false;
        self
    }

    pub async fn start(self) -> TestEnv {
        let pier_port = free_port();
        let registry_port = self.registry_port.unwrap_or_else(free_port);
        let (db, pier_database_url) = match &self.database {
            None => {
                let db = TestDb::create().await;
                let url = db.url.clone();
                (db, url)
            }
            Some((server, pier_url)) => {
                let db = TestDb::create_on(server).await;
                let url = pier_url.replace("{db}", &db.name);
                (db, url)
            }
        };
        let mut env = TestEnv {
            pier_database_url,
            pier: None,
            guards: self.apps.iter().map(|a| AppGuard::new(&a.name)).collect(),
            registry: None,
            db,
            engine: Engine::connect().await,
            apps: self.apps,
            pier_port,
            registry_port,
            proxy_admin_port: free_port(),
            proxy_dir: tempfile::Builder::new()
                .prefix("pier-proxy-")
                .tempdir()
                .expect("tempdir"),
            admin_token: random_hex(32),
            distribution_token: random_hex(32),
            generic_secret: random_hex(32),
            workers: self.workers,
            lease: self.lease,
            extra_server_toml: self.extra_server_toml,
            pier_env: self.pier_env,
            program: self.program,
            registry_user: self.registry_auth.as_ref().map(|(u, _)| u.clone()),
            extra_sources_toml: self.extra_sources_toml,
        };
        if self.start_pier {
            env.start_pier().await;
        }
        let notify = self.notify.then(|| env.hook_url("local"));
        env.registry = Some(
            Registry::start_full(
                registry_port,
                notify.as_deref(),
                &env.distribution_token,
                self.registry_auth,
            )
            .await,
        );
        env
    }
}

/// A database, a registry that notifies Pier's `/hooks/local`, a Pier process and one or
/// more uniquely named apps with their own publish ports. Fields drop in declaration order:
/// Pier first, then the apps' containers, then the registry, then the database.
pub struct TestEnv {
    /// `server.database_url` of the config (several hosts on a [`PgPair`]).
    pub pier_database_url: String,
    pub pier: Option<PierProcess>,
    guards: Vec<AppGuard>,
    registry: Option<Registry>,
    pub db: TestDb,
    pub engine: Engine,
    pub apps: Vec<AppSpec>,
    pub pier_port: u16,
    pub registry_port: u16,
    /// `[proxy] admin` of the config: `pier proxy`'s loopback admin endpoint.
    pub proxy_admin_port: u16,
    /// Where the proxy keeps its last known routes.
    proxy_dir: TempDir,
    pub admin_token: String,
    /// `[[sources]] local` (distribution): sent as `Authorization: Bearer <token>`.
    pub distribution_token: String,
    /// `[[sources]] gen` (generic): HMAC-SHA256 secret for `X-Pier-Signature`.
    pub generic_secret: String,
    workers: usize,
    lease: String,
    extra_server_toml: String,
    pier_env: Vec<(String, String)>,
    program: Option<PathBuf>,
    registry_user: Option<String>,
    extra_sources_toml: String,
}

impl TestEnv {
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder {
            apps: vec![AppSpec::new("web")],
            workers: 2,
            lease: "10s".to_owned(),
            start_pier: true,
            notify: true,
            pier_env: Vec::new(),
            extra_server_toml: String::new(),
            registry_auth: None,
            extra_sources_toml: String::new(),
            database: None,
            registry_port: None,
            program: None,
        }
    }

    /// The default environment, Pier started.
    pub async fn start() -> TestEnv {
        Self::builder().start().await
    }

    /// The first app's name.
    pub fn app(&self) -> &str {
        &self.apps[0].name
    }

    /// The first app's repository inside the registry (`demo/<app>`).
    pub fn repo(&self) -> &str {
        &self.apps[0].repo
    }

    /// The first app's published address.
    pub fn publish(&self) -> SocketAddr {
        self.apps[0].publish()
    }

    /// `http://127.0.0.1:<publish><path>`, the first app as its users see it.
    pub fn app_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.publish())
    }

    pub fn registry(&self) -> &Registry {
        self.registry.as_ref().expect("registry not started")
    }

    pub fn registry_mut(&mut self) -> &mut Registry {
        self.registry.as_mut().expect("registry not started")
    }

    /// `127.0.0.1:<registry port>`.
    pub fn registry_host(&self) -> String {
        format!("127.0.0.1:{}", self.registry_port)
    }

    /// The first app's image without tag: `127.0.0.1:PORT/demo/<app>`.
    pub fn image(&self) -> String {
        format!("{}/{}", self.registry_host(), self.repo())
    }

    pub fn pier(&self) -> &PierProcess {
        self.pier.as_ref().expect("pier not started")
    }

    pub fn pier_mut(&mut self) -> &mut PierProcess {
        self.pier.as_mut().expect("pier not started")
    }

    /// `http://127.0.0.1:<pier port><path>`.
    pub fn pier_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.pier_port)
    }

    /// Pier's `/hooks/<source>` URL.
    pub fn hook_url(&self, source: &str) -> String {
        self.pier_url(&format!("/hooks/{source}"))
    }

    /// The pier.toml for a process listening on `listen_port` (several processes may share
    /// the database; give each its own port).
    pub fn config_toml_on(&self, listen_port: u16) -> String {
        let mut s = format!(
            "[server]\nlisten = \"127.0.0.1:{listen_port}\"\ndatabase_url = {db}\n\
             admin_token = \"{admin}\"\nworkers = {workers}\nlease = \"{lease}\"\n{extra}\
             \n[proxy]\nadmin = \"127.0.0.1:{proxy_admin}\"\nstate_file = {state}\n\
             \n[[registries]]\nhost = \"{reg}\"\ninsecure = true\n{auth}\
             \n[[sources]]\nname = \"local\"\nkind = \"distribution\"\ntoken = \"{token}\"\n\
             \n[[sources]]\nname = \"gen\"\nkind = \"generic\"\nhmac_secret = \"{hmac}\"\n",
            db = toml_str(&self.pier_database_url),
            admin = self.admin_token,
            workers = self.workers,
            lease = self.lease,
            extra = self.extra_server_toml,
            proxy_admin = self.proxy_admin_port,
            state = toml_str(&self.proxy_dir.path().join("routes.json").to_string_lossy()),
            reg = self.registry_host(),
            auth = self
                .registry_user
                .as_ref()
                .map(|u| format!(
                    "username = \"{u}\"\npassword = \"env:PIER_TEST_REGISTRY_PASSWORD\"\n"
                ))
                .unwrap_or_default(),
            token = self.distribution_token,
            hmac = self.generic_secret,
        );
        if !self.extra_sources_toml.is_empty() {
            s.push('\n');
            s.push_str(
                &self
                    .extra_sources_toml
                    .replace("{registry}", &self.registry_host()),
            );
        }
        for app in &self.apps {
            s.push_str(&app.render(&self.registry_host()));
        }
        s
    }

    /// More top-level TOML for every config rendered from now on (e.g. the `[[targets]]`
    /// entry of an [`ExtraEngine`] started once the registry's port was known).
    pub fn add_sources_toml(&mut self, toml: &str) {
        self.extra_sources_toml.push_str(toml.trim_end());
        self.extra_sources_toml.push('\n');
    }

    /// The pier.toml of the main Pier process.
    pub fn config_toml(&self) -> String {
        self.config_toml_on(self.pier_port)
    }

    /// The command that starts the main Pier process (config, env from the builder).
    pub fn pier_command(&self) -> PierCommand {
        let mut cmd = PierCommand::new(&self.config_toml());
        if let Some(program) = &self.program {
            cmd = cmd.program(program);
        }
        for (k, v) in &self.pier_env {
            cmd = cmd.env(k, v);
        }
        cmd
    }

    /// Starts the main Pier process (panics if it is already running).
    pub async fn start_pier(&mut self) {
        assert!(
            self.pier.as_mut().is_none_or(|p| !p.is_running()),
            "pier is already running"
        );
        self.pier = Some(self.pier_command().start().await);
    }

    /// `pier proxy` with this environment's config, but keeping its last known routes in
    /// `state_file` (one per host: proxies of different targets must not share one), not
    /// waiting for `[server].listen` (a proxy does not serve it).
    pub fn proxy_command(&self, state_file: &Path) -> PierCommand {
        let ours = toml_str(&self.proxy_dir.path().join("routes.json").to_string_lossy());
        let ours = format!("state_file = {ours}");
        let mut cmd = self.pier_command().args(["proxy"]).wait_healthy(false);
        assert!(cmd.config_toml.contains(&ours), "{}", cmd.config_toml);
        cmd.config_toml = cmd.config_toml.replace(
            &ours,
            &format!("state_file = {}", toml_str(&state_file.to_string_lossy())),
        );
        cmd
    }

    /// Starts `pier proxy` with this environment's config; waits for its admin endpoint.
    pub async fn start_proxy(&self) -> PierProcess {
        let admin = format!("http://127.0.0.1:{}/healthz", self.proxy_admin_port);
        let p = self
            .pier_command()
            .args(["proxy"])
            .wait_healthy(false)
            .start()
            .await;
        wait_until(
            "pier proxy answers on its admin port",
            Duration::from_secs(20),
            || {
                let admin = admin.clone();
                async move { matches!(http_get(&admin).await, Some((200, _))).then_some(()) }
            },
        )
        .await;
        p
    }

    /// What the proxy's admin endpoint says (`GET /routes`).
    pub async fn proxy_routes(&self) -> serde_json::Value {
        let url = format!("http://127.0.0.1:{}/routes", self.proxy_admin_port);
        let (_, body) = http_get(&url).await.expect("proxy admin answers");
        serde_json::from_str(&body).expect("proxy admin answers JSON")
    }

    /// Starts an additional `pier serve` on another port against the same database.
    pub async fn start_another_pier(&self) -> PierProcess {
        let mut cmd = PierCommand::new(&self.config_toml_on(free_port()));
        for (k, v) in &self.pier_env {
            cmd = cmd.env(k, v);
        }
        cmd.start().await
    }

    /// Pushes `image` to the first app's repository under `tag`; returns its digest.
    pub async fn push(&self, image: &TestImage, tag: &str) -> String {
        self.registry().push(self.repo(), tag, image).await
    }

    /// Sends a raw webhook to `/hooks/<source>`.
    pub async fn post_hook(
        &self,
        source: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        http_post(&self.hook_url(source), headers, body.to_vec())
            .await
            .unwrap_or_else(|| panic!("no answer from {}", self.hook_url(source)))
    }

    /// Sends `body` to the generic source, signed with `X-Pier-Signature: sha256=<hex>`.
    pub async fn post_generic(&self, body: &[u8]) -> (u16, String) {
        let sig = sign_hmac_sha256(&self.generic_secret, body);
        self.post_hook(
            "gen",
            &[
                ("Content-Type", "application/json"),
                ("X-Pier-Signature", &sig),
            ],
            body,
        )
        .await
    }

    /// GETs `/api/<path>` with the admin bearer token and parses the JSON; `(status, json)`
    /// (`Value::Null` if the body is not JSON).
    pub async fn api_get(&self, path: &str) -> (u16, serde_json::Value) {
        let url = self.pier_url(&format!("/api{path}"));
        let resp = http_client()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        (
            status,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Waits until the first app answers `GET /version` with `version`; panics after
    /// `timeout`.
    pub async fn wait_app_version(&self, version: &str, timeout: Duration) {
        let url = self.app_url("/version");
        let want = version.to_owned();
        wait_until(
            &format!("{url} serves version {version:?}"),
            timeout,
            || {
                let url = url.clone();
                let want = want.clone();
                async move {
                    match http_get(&url).await {
                        Some((200, body)) if body == want => Some(()),
                        _ => None,
                    }
                }
            },
        )
        .await
    }

    /// Kills Pier, removes the apps' containers, stops the registry, drops the database.
    pub async fn cleanup(mut self) {
        if let Some(mut p) = self.pier.take() {
            p.kill();
        }
        for g in &mut self.guards {
            g.cleanup().await;
        }
        if let Some(mut r) = self.registry.take() {
            r.stop();
        }
        self.db.cleanup().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Reading Pier's own answers
// ---------------------------------------------------------------------------------------------

impl TestEnv {
    /// Waits until `app`'s latest deployment is final and is none of `not`; returns it.
    pub async fn latest_final_of(
        &self,
        app: &str,
        not: &[&str],
        timeout: Duration,
    ) -> serde_json::Value {
        let not: Vec<String> = not.iter().map(|s| s.to_string()).collect();
        wait_until(&format!("a new final deployment of {app}"), timeout, || {
            let not = not.clone();
            async move {
                let (status, v) = self.api_get(&format!("/apps/{app}")).await;
                let d = v.get("latest_deployment")?.clone();
                let id = d.get("id")?.as_str()?.to_owned();
                let state = d.get("state")?.as_str()?;
                (status == 200 && !not.contains(&id) && !matches!(state, "queued" | "running"))
                    .then_some(d)
            }
        })
        .await
    }

    /// The newest deployment of the first app that is not in `seen`, once final (and then
    /// added to `seen`): after a push, the deployment it queued, never the previous one
    /// that is still the newest until the registry's notification arrives (a race a
    /// loaded machine loses).
    pub async fn next_final_deployment(
        &self,
        seen: &std::sync::Mutex<Vec<String>>,
        timeout: Duration,
    ) -> serde_json::Value {
        let app = self.app().to_owned();
        let newest = wait_until("a new newest deployment", timeout, || {
            let app = app.clone();
            async move {
                let newest = self.deployment_rows(&app).await.pop()?;
                let known = seen.lock().unwrap().contains(&newest.id);
                (!known).then_some(newest)
            }
        })
        .await;
        seen.lock().unwrap().push(newest.id.clone());
        self.deployment_final(&newest.id, timeout).await
    }

    /// Waits until deployment `id` is final; returns it with its steps.
    pub async fn deployment_final(&self, id: &str, timeout: Duration) -> serde_json::Value {
        wait_until(&format!("deployment {id} final"), timeout, || async move {
            let (_, d) = self.api_get(&format!("/deployments/{id}")).await;
            let state = d.get("state")?.as_str()?;
            (!matches!(state, "queued" | "running")).then_some(d.clone())
        })
        .await
    }

    /// The `pier.digest` labels of the app's running containers.
    pub async fn running_digests_of(&self, app: &str) -> Vec<String> {
        self.engine
            .running_containers_of_app(app)
            .await
            .into_iter()
            .map(|c| {
                c.labels
                    .unwrap_or_default()
                    .get("pier.digest")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    /// All deployments of `app`, oldest first, straight from the database.
    pub async fn deployment_rows(&self, app: &str) -> Vec<DeploymentRow> {
        sqlx::query_as(
            "SELECT id::text, state, trigger, resolved_digest, superseded_by::text, attempt,
                    started_at, finished_at
             FROM deployments WHERE app = $1 ORDER BY created_at",
        )
        .bind(app)
        .fetch_all(&self.db.pool)
        .await
        .expect("read deployments")
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRow {
    pub id: String,
    pub state: String,
    pub trigger: String,
    pub resolved_digest: Option<String>,
    pub superseded_by: Option<String>,
    pub attempt: i32,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
}
