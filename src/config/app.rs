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

/// An app's HTTP health check. Without it Pier relies on the image's own `HEALTHCHECK`, if
/// it has one; without either, running is all Pier can check. Needs `publish` (or a
/// blue-green app's route).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct Health {
    /// HTTP health check: `GET http://{publish}{path}` must answer 2xx (with `json`, also
    /// carry those fields). The path starts with `/`. On a remote engine the app is
    /// published on that host's loopback, which Pier cannot reach: the check is sent by the
    /// `pier proxy --target NAME` running on that host, and without one there the
    /// deployment fails at `health`.
    path: String,
    /// How long a new container gets to become healthy before the deployment fails (and the
    /// previous version keeps or resumes serving).
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    timeout: Duration,
    /// Fields the JSON body (at most 64 KiB) must have besides a 2xx, by dotted path: `{
    /// status = "UP" }`, `{ "components.db.status" = "UP" }`. Non-string values compare by
    /// their JSON text (`true`, `3`).
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
/// An app: what to deploy (a repository and which of its tags), where (its targets) and how
/// (its strategy, health check, limits, containment and gates). Its containment fields
/// (`service`, `networks`, `volumes`, `secrets`, `files`, `binds`, `devices`, `cap_keep`,
/// `read_only`, `tmpfs`, `user`, `port_env`) are explained on the Contained apps page.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct App {
    /// The app's name in URLs and the `pier.app` label: lower-case letters, digits, `-`,
    /// `_`; unique.
    pub(super) name: String,
    /// The repository, without tag or digest, as `docker pull` reads it:
    /// `127.0.0.1:5000/demo/web`, `ghcr.io/acme/web`, or a Docker Hub name (`acme/web` is
    /// `docker.io/acme/web`, `nginx` is `docker.io/library/nginx`). The first part is a
    /// registry host only if it has a `.` or a `:` or is `localhost`. A tag or digest,
    /// upper-case letters or anything else the distribution grammar refuses stop Pier at
    /// start-up with the app named. The engine's record of a pulled
    /// image is compared in the same normalised form (`nginx` is `docker.io/library/nginx`).
    image: String,
    /// The tag whose pushes deploy this app; with `*` (any run of characters) or `?` (one
    /// character) a glob (`"v1.*"`): a push of any matching tag deploys that tag.
    ///
    /// Default: `"latest"`, unless `versions` is set.
    tag: Option<String>,
    /// Instead of `tag`: a semver range (`">=1.2, <2"`, `"^1.4"`, `"~2.0"`). Tags that are
    /// versions (`1.2.3` or `v1.2.3`) match; the highest matching version deploys, and a
    /// push of a lower one never rolls the app back.
    versions: Option<String>,
    /// The reconcile poller: how often Pier asks the registry what this app follows and
    /// queues a `reconcile` deployment when that digest neither serves nor waits; the
    /// safety net for lost webhooks. A duration (at least `1s`) or `"off"`.
    ///
    /// Default: `"off"` if a source covers the app's registry, else `"5m"`.
    poll: Option<String>,
    /// The port the app listens on inside its container: its one TCP port, which is its
    /// HTTP port. `port = 8080` is `ports = [{ container = 8080 }]`; give one of the two.
    port: Option<u16>,
    /// Instead of `port`: several ports, TCP and UDP, each a `[[apps.ports]]` entry:
    /// `[{ container = 8080 }, { container = 9090, name = "metrics" }, { container = 5353,
    /// protocol = "udp" }]`. The one marked `http = true` (else the first TCP port) is the
    /// HTTP port that `pier proxy` routes to and the health check asks. A blue-green app
    /// publishes each on an ephemeral loopback port and journals every binding; a recreate
    /// app publishes those that name a `publish` address.
    ports: Option<Vec<super::ports::RawPort>>,
    /// With `port`: the host address the app is published on, e.g. `127.0.0.1:8081`; an
    /// HTTP health check probes it. Every interface (`0.0.0.0:…`, `[::]:…`) is refused
    /// unless `publish_public = true`. Not for blue-green apps, which are reached through
    /// `pier proxy`. With `ports`, each port has its own `publish`.
    publish: Option<SocketAddr>,
    /// Accept a `publish` (the app's, or a port's) on every interface of the host: anyone
    /// who reaches the host reaches the app directly, past any TLS proxy in front of it;
    /// the app's page and `GET /api/apps/{app}` (`warnings`) then say so. Refused without
    /// any `publish`.
    #[serde(default)]
    publish_public: bool,
    /// The HTTP health check, see `[apps.health]`.
    health: Option<Health>,
    /// Environment variables of the app's containers. Each value may be a secret reference
    /// (`env:NAME`, `file:PATH`): such values are masked (`***`) in the logs Pier shows.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Memory limit, a size (`"256m"`).
    ///
    /// Default: no limit.
    #[schemars(with = "Option<super::doc_types::SizeText>")]
    memory: Option<String>,
    /// CPU limit in cores, fractions allowed (`0.5`, `2`).
    ///
    /// Default: no limit.
    cpus: Option<f64>,
    /// The engine's restart policy for the app's containers.
    #[serde(default)]
    restart: RestartPolicy,
    /// How a new version replaces the old one on an engine; `blue-green` needs
    /// `[apps.route]` and no `publish`.
    #[serde(default)]
    strategy: Strategy,
    /// How long a container gets after SIGTERM before it is killed.
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    stop_timeout: Duration,
    /// The container's processes cannot gain privileges (setuid binaries, file
    /// capabilities), Docker's `no-new-privileges`.
    #[serde(default = "default_true")]
    no_new_privileges: bool,
    /// Most processes and threads in the container, so that a fork bomb stops there; `0` is
    /// no limit.
    #[serde(default = "default_pids_limit")]
    pids_limit: i64,
    /// How `pier proxy` reaches a blue-green app, see `[apps.route]`.
    route: Option<super::proxy::RawRoute>,
    #[serde(flatten)]
    contained: super::contained::RawContained,
    /// Replaces the image's entrypoint and command: the program, then its arguments
    /// (`["/app/web", "--port", "8080"]`).
    ///
    /// Default: the image's.
    command: Option<Vec<String>>,
    /// Further services deployed with the app as one generation (a queue worker, say), each
    /// `[apps.services.<name>]`; the name is a DNS label that differs from the primary's
    /// `service`. Not for blue-green apps.
    #[serde(default)]
    services: BTreeMap<String, super::services::RawService>,
    /// The targets the app runs on, in rollout order: `local` and names of `[[targets]]`
    /// entries. An app on a swarm target names that target alone.
    ///
    /// Default: `["local"]`.
    targets: Option<Vec<String>>,
    /// How one deployment crosses several targets, see `[apps.rollout]`.
    rollout: Option<super::targets::RawRollout>,
    /// `true`: only images signed by a key of a covering `[[trust]]` entry run (Pier
    /// refuses to start if none covers the image); `false`: exempt from the `[[trust]]`
    /// entries.
    ///
    /// Default: as the `[[trust]]` entries covering the image say.
    require_signature: Option<bool>,
    /// Deployments wait until enough named admins approve, see `[apps.approval]`.
    approval: Option<super::gates::RawApproval>,
    /// Deploy windows, `DAYS START-END ZONE`: `"Mon-Fri 09:00-17:00 Europe/Berlin"`, days
    /// `Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri` or `daily`, times `HH:MM` or `HH:MM:SS` (an end
    /// at or before the start runs past midnight), an IANA zone. Outside every window a
    /// deployment waits in `awaiting_window` until the next one opens.
    ///
    /// Default: any time.
    #[serde(default)]
    windows: Vec<String>,
    /// Another app whose healthy digest this one gets: pushes and the poller do not deploy
    /// this app; the digest `promote_from` has served healthily for `after` is deployed to
    /// it (trigger `promotion`). Both apps must have the same `image`.
    promote_from: Option<String>,
    /// With `promote_from`: how long the other app must have served a digest healthily (not
    /// rolled back, not failed, nothing newer) before it is promoted.
    ///
    /// Default: `"0s"`.
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    after: Option<String>,
    /// The service of an app on a `kind = "swarm"` target, see `[apps.swarm]`.
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

/// `memory = "512m"` as bytes.
fn memory_bytes(app: &str, memory: Option<&str>) -> Result<Option<i64>, ConfigError> {
    memory
        .map(parse_bytes)
        .transpose()
        .map_err(|e| invalid(format!("app `{app}`: memory: {e}")))
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
        let ports = super::ports::Written {
            port: self.port,
            publish: self.publish,
            ports: self.ports.take(),
            public: self.publish_public,
            strategy: self.strategy,
        }
        .resolve(&self.name)?;
        let on_swarm = super::swarm::names_swarm(self.targets.as_deref(), known.targets);
        self.check_health_and_cpus(on_swarm, ports.http().publish)?;
        let env = resolve_env(&self.name, self.env, base)?;
        let contained = self.contained.resolve(&self.name, &env, base)?;
        let rule = tag_rule(&self.name, self.tag.as_deref(), self.versions.as_deref())?;
        let poll = parse_poll(&self.name, self.poll.as_deref())?;
        let memory_bytes = memory_bytes(&self.name, self.memory.as_deref())?;
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
            ports,
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

    /// An HTTP health check needs an address to ask (a recreate app's HTTP port's
    /// `publish`, unless Swarm runs it); its path is a path; `cpus` is a share the engine
    /// can give.
    fn check_health_and_cpus(
        &self,
        on_swarm: bool,
        http_publish: Option<SocketAddr>,
    ) -> Result<(), ConfigError> {
        let name = &self.name;
        if self.health.is_some()
            && http_publish.is_none()
            && self.strategy == Strategy::Recreate
            && !on_swarm
        {
            return Err(invalid(format!(
                "app `{name}`: an HTTP health check needs `publish` (with `ports`, the HTTP \
                 port's `publish`)"
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
