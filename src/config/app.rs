//! One `[[apps]]` entry as written, and how it validates itself: its name, image, tag rule,
//! strategy, health check and limits here; its containment, services, targets, gates,
//! signature and swarm service by the modules of those sections.

use super::*;
use crate::domain::AppName;

fn default_tag() -> String {
    "latest".into()
}
fn default_health_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_true() -> bool {
    true
}
/// Enough for a JVM's threads; a fork bomb stops here instead of at the host's limit.
fn default_pids_limit() -> i64 {
    super::services::DEFAULT_PIDS_LIMIT
}

/// How often an app that no webhook source covers is polled by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);
/// The shortest poll interval: anything shorter is a busy loop against someone's registry.
const MIN_POLL: Duration = Duration::from_secs(1);

/// `poll`: `None` (the default for the app), `Some(None)` (off), `Some(Some(every))`.
fn parse_poll(app: &str, text: Option<&str>) -> Result<Option<Option<Duration>>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    if text.trim() == "off" {
        return Ok(Some(None));
    }
    let every = humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(format!(
            "app `{app}`: poll `{text}` is neither \"off\" nor a duration such as \"5m\": {e}"
        ))
    })?;
    if every < MIN_POLL {
        return Err(invalid(format!("app `{app}`: poll must be at least 1s")));
    }
    Ok(Some(Some(every)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Health {
    path: String,
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    timeout: Duration,
    /// Fields the JSON body must have, e.g. `{ status = "UP" }`.
    #[serde(default)]
    json: BTreeMap<String, String>,
}

impl Health {
    fn into_config(self) -> HealthConfig {
        HealthConfig {
            path: self.path,
            timeout: self.timeout,
            json: self.json,
        }
    }
}

// `deny_unknown_fields` holds with `flatten`: a key neither this struct nor
// `RawContained` knows is still refused by name (see the test in `contained.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct App {
    pub(super) name: String,
    image: String,
    /// An exact tag, or a glob (`v1.*`); default `latest` unless `versions` is set.
    tag: Option<String>,
    /// A semver range (`>=1.2, <2`): the highest matching version deploys.
    versions: Option<String>,
    /// `"off"`, or how often to ask the registry what the app's tags name (`"5m"`).
    poll: Option<String>,
    port: u16,
    publish: Option<SocketAddr>,
    /// Acknowledges a `publish` on every interface (`0.0.0.0`, `[::]`); see `contained.rs`.
    #[serde(default)]
    publish_public: bool,
    health: Option<Health>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    memory: Option<String>,
    cpus: Option<f64>,
    #[serde(default)]
    restart: RestartPolicy,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    stop_timeout: Duration,
    #[serde(default = "default_true")]
    no_new_privileges: bool,
    #[serde(default = "default_pids_limit")]
    pids_limit: i64,
    route: Option<super::proxy::RawRoute>,
    /// Contained apps: service, networks, volumes, secrets, files, binds,
    /// devices, cap_keep, read_only, tmpfs, user, port_env; see `contained.rs`.
    #[serde(flatten)]
    contained: super::contained::RawContained,
    /// Replaces the image's entrypoint and command: the program, then its arguments.
    command: Option<Vec<String>>,
    /// The app's further services (`[apps.services.worker]`), see `services.rs`.
    #[serde(default)]
    services: BTreeMap<String, super::services::RawService>,
    /// The targets the app runs on (default `["local"]`) and how a rollout crosses them.
    targets: Option<Vec<String>>,
    rollout: Option<super::targets::RawRollout>,
    /// The image must be signed by a key of a `[[trust]]` entry covering it;
    /// default: as the covering entries say.
    require_signature: Option<bool>,
    /// Approvals and deploy windows (see `gates.rs`).
    approval: Option<super::gates::RawApproval>,
    #[serde(default)]
    windows: Vec<String>,
    promote_from: Option<String>,
    after: Option<String>,
    /// The service of an app on a `kind = "swarm"` target, see `swarm.rs`.
    swarm: Option<super::swarm::RawSwarm>,
}

/// The sections resolved before the apps, which an app refers to by name.
pub(super) struct Known<'a> {
    pub targets: &'a [TargetConfig],
    pub trust: &'a [TrustEntry],
    pub admins: &'a [NamedAdmin],
    pub base: &'a Path,
}

/// The `[[apps]]` list: names unique and well-formed, each app checked whole.
pub(super) fn resolve_apps(raw: Vec<App>, known: &Known) -> Result<Vec<AppConfig>, ConfigError> {
    let mut apps: Vec<AppConfig> = Vec::new();
    for a in raw {
        let Ok(name) = AppName::parse(&a.name) else {
            return Err(invalid(format!(
                "app name `{}`: use lower-case letters, digits, - and _",
                a.name
            )));
        };
        if apps.iter().any(|o| o.name == name) {
            return Err(invalid(format!("app `{name}` is defined twice")));
        }
        apps.push(a.resolve(name, known)?);
    }
    Ok(apps)
}

impl App {
    /// Checks in the order they have always been reported; each section's own checks live
    /// with that section.
    fn resolve(mut self, name: AppName, known: &Known) -> Result<AppConfig, ConfigError> {
        let base = known.base;
        let image_name = crate::domain::image::ImageName::parse(&self.image)
            .map_err(|e| invalid(format!("app `{}`: image {e}", self.name)))?;
        let route = self
            .route
            .take()
            .map(|r| r.resolve(&self.name, base))
            .transpose()?;
        check_strategy(&self.name, self.strategy, route.as_ref(), self.publish)?;
        super::contained::check_publish(&self.name, self.publish, self.publish_public)?;
        let on_swarm = super::swarm::names_swarm(self.targets.as_deref(), known.targets);
        self.check_health_and_cpus(on_swarm)?;
        let env = resolve_env(&self.name, self.env, base)?;
        let contained = self.contained.resolve(&self.name, &env, base)?;
        let rule = tag_rule(&self.name, self.tag.as_deref(), self.versions.as_deref())?;
        let poll = parse_poll(&self.name, self.poll.as_deref())?;
        let memory_bytes = self
            .memory
            .map(|m| parse_bytes(&m))
            .transpose()
            .map_err(|e| invalid(format!("app `{}`: memory: {e}", self.name)))?;
        let command = super::services::command(&self.name, "", self.command)?;
        let app_targets = super::targets::app_targets(&self.name, self.targets, known.targets)?;
        let rollout = self
            .rollout
            .map(|r| r.resolve(&self.name))
            .transpose()?
            .unwrap_or_default();
        let gates = super::gates::RawGates {
            approval: self.approval,
            windows: self.windows,
            promote_from: self.promote_from,
            after: self.after,
        }
        .resolve(&self.name, known.admins)?;
        let mut app = AppConfig {
            gates,
            name,
            image: self.image,
            image_name,
            tag: rule.text().to_owned(),
            rule,
            poll: poll.unwrap_or(None),
            poll_explicit: poll.is_some(),
            port: self.port,
            publish: self.publish,
            publish_public: self.publish_public,
            health: self.health.map(Health::into_config),
            env,
            memory_bytes,
            cpus: self.cpus,
            restart: self.restart,
            strategy: self.strategy,
            stop_timeout: self.stop_timeout,
            no_new_privileges: self.no_new_privileges,
            pids_limit: (self.pids_limit > 0).then_some(self.pids_limit),
            route,
            contained,
            command,
            settle: super::services::DEFAULT_SETTLE,
            services: vec![],
            targets: app_targets,
            rollout,
            signature: None,
            swarm: None,
        };
        if app.gates.promotion.is_some() {
            // Only promotions deploy it; no push, no poll.
            app.poll = None;
            app.poll_explicit = true;
        }
        app.services = super::services::resolve(&app, self.services, base)?;
        app.signature = super::trust::for_app(&app, self.require_signature, known.trust)?;
        app.swarm = super::swarm::resolve(&app, self.swarm, known.targets)?;
        Ok(app)
    }

    /// An HTTP health check needs an address to ask (a recreate app's `publish`, unless
    /// Swarm runs it); its path is a path; `cpus` is a share the engine can give.
    fn check_health_and_cpus(&self, on_swarm: bool) -> Result<(), ConfigError> {
        let name = &self.name;
        if self.health.is_some()
            && self.publish.is_none()
            && self.strategy == Strategy::Recreate
            && !on_swarm
        {
            return Err(invalid(format!(
                "app `{name}`: an HTTP health check needs `publish`"
            )));
        }
        if let Some(h) = &self.health
            && !h.path.starts_with('/')
        {
            return Err(invalid(format!(
                "app `{name}`: health.path must start with /"
            )));
        }
        if let Some(c) = self.cpus
            && !(c > 0.0 && c <= 1024.0)
        {
            return Err(invalid(format!("app `{name}`: cpus must be > 0")));
        }
        Ok(())
    }
}

/// Blue-green needs Pier's proxy in front (a route) and no fixed port of its own;
/// recreate owns its fixed port and has no route.
fn check_strategy(
    name: &str,
    strategy: Strategy,
    route: Option<&RouteConfig>,
    publish: Option<SocketAddr>,
) -> Result<(), ConfigError> {
    match (strategy, route, publish) {
        (Strategy::BlueGreen, None, _) => Err(invalid(format!(
            "app `{name}`: blue-green needs a [apps.route] for Pier's proxy"
        ))),
        (Strategy::BlueGreen, _, Some(_)) => Err(invalid(format!(
            "app `{name}`: a blue-green app has no `publish`: each generation gets an \
             ephemeral loopback port and clients come through the proxy's `route.listen`"
        ))),
        (Strategy::Recreate, Some(_), _) => Err(invalid(format!(
            "app `{name}`: [apps.route] is for strategy = \"blue-green\""
        ))),
        _ => Ok(()),
    }
}

/// `env` values, each maybe an `env:` or `file:` reference.
fn resolve_env(
    app: &str,
    raw: BTreeMap<String, String>,
    base: &Path,
) -> Result<BTreeMap<String, Secret>, ConfigError> {
    let mut env = BTreeMap::new();
    for (k, v) in raw {
        let what = format!("apps.{app}.env.{k}");
        env.insert(k, Secret::resolve(&what, &v, base)?);
    }
    Ok(env)
}

/// `tag` (exact or glob) or `versions` (a semver range), never both; default `latest`.
fn tag_rule(app: &str, tag: Option<&str>, versions: Option<&str>) -> Result<TagRule, ConfigError> {
    match (tag, versions) {
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "app `{app}`: give `tag` (exact or glob) or `versions` (a semver range), not both"
            )));
        }
        (_, Some(v)) => TagRule::from_versions(v),
        (Some(t), None) => TagRule::from_tag(t),
        (None, None) => TagRule::from_tag(&default_tag()),
    }
    .map_err(|e| invalid(format!("app `{app}`: {e}")))
}
