//! `[apps.services.<name>]`: an app's further services (a `worker` beside the web server),
//! deployed with the primary one as one generation. Each is checked whole at load and
//! turned into the app's settings as that service's container sees them, so the pipeline
//! creates, starts and checks it with the same code as the primary one.
//!
//! What a service is: the app's image at the same digest (one push names them all), or its
//! own repository (`image`) at the same tag the push named for the app; the app-wide `env`
//! (its own `env` and `secrets` keys win), its own command, secrets, limits, hardening,
//! volumes and shared networks, and no port: it is
//! not published and has no HTTP health check. It is healthy when its image's HEALTHCHECK
//! says so, or else when it runs and is still running after `settle`.

use std::path::Path;

use serde::de::IgnoredAny;

use super::contained::{RawContained, RawHostMount, RawVolume};
use super::*;
use crate::domain::image::ImageName;

/// How long a service without a health check must keep running before it counts as
/// healthy: long enough for a process that dies at start-up to have died.
pub(crate) const DEFAULT_SETTLE: Duration = Duration::from_secs(2);
/// Enough for a JVM's threads; a fork bomb stops here instead of at the host's limit.
pub(super) const DEFAULT_PIDS_LIMIT: i64 = 4096;

/// A further service of an app, deployed with it as one generation: all created, started
/// and healthy, then switched together, or none is. Its container joins `pier-<app>` with
/// the service's name as alias. It has no port, `publish`, `health`, `port_env` or host
/// paths (refused at load with the reason).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    /// Another repository (`"ghcr.io/acme/worker"`, no tag or digest): the service runs
    /// what that repository has at the tag the push named for the app, resolved, pulled and
    /// verified before any container is created.
    ///
    /// Default: the app's image, at the digest the push named.
    image: Option<String>,
    /// Replaces the image's entrypoint (and so its command): `["program", "arg", ...]`.
    ///
    /// Default: the image's.
    command: Option<Vec<String>>,
    /// Environment variables: the app-wide `env` is inherited; these add keys and replace
    /// the app's value of a key they set (a key in `secrets` replaces it too).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The service's own secrets, not inherited from the app: a worker is given a
    /// credential only where it is named. As the app's `secrets`: `"env:…"`/`"file:…"`, or
    /// `{ from = "env:…" | "file:…" | "age:PATH#KEY", as = "env" | "file" }`.
    #[serde(default)]
    secrets: BTreeMap<String, super::secrets::RawSecret>,
    /// Memory limit.
    ///
    /// Default: no limit.
    #[schemars(with = "Option<super::doc_types::SizeText>")]
    memory: Option<String>,
    /// CPU limit in cores.
    ///
    /// Default: no limit.
    cpus: Option<f64>,
    /// The engine's restart policy.
    ///
    /// Default: `"unless-stopped"`.
    restart: Option<RestartPolicy>,
    /// Time after SIGTERM before the container is killed.
    ///
    /// Default: the app's.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    stop_timeout: Option<Duration>,
    /// As the app's.
    ///
    /// Default: `true`.
    no_new_privileges: Option<bool>,
    /// As the app's.
    ///
    /// Default: `4096`.
    pids_limit: Option<i64>,
    /// Shared networks it joins, as the app's.
    #[serde(default)]
    networks: Vec<String>,
    /// Owned volumes, as the app's; two services may mount one volume name (it is the
    /// app's).
    #[serde(default)]
    volumes: Vec<RawVolume>,
    /// Capabilities kept, as the app's.
    ///
    /// Default: as for apps.
    cap_keep: Option<Vec<String>>,
    /// A read-only root filesystem.
    #[serde(default)]
    read_only: bool,
    /// Writable in-memory mounts, as the app's.
    #[serde(default)]
    tmpfs: Vec<super::tmpfs::RawTmpfs>,
    /// The user to run as.
    ///
    /// Default: the image's.
    user: Option<String>,
    /// Health without a port: the image's `HEALTHCHECK` when it has one (120 s to turn
    /// healthy); otherwise the container must be running, never restarted, for this long.
    ///
    /// Default: `"2s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    settle: Option<Duration>,
    // Accepted by the parser only to be refused with a reason (see `resolve`).
    #[schemars(skip)]
    port: Option<IgnoredAny>,
    #[schemars(skip)]
    ports: Option<IgnoredAny>,
    #[schemars(skip)]
    publish: Option<IgnoredAny>,
    #[schemars(skip)]
    health: Option<IgnoredAny>,
    #[schemars(skip)]
    port_env: Option<IgnoredAny>,
    #[schemars(skip)]
    files: Option<Vec<RawHostMount>>,
    #[schemars(skip)]
    binds: Option<Vec<RawHostMount>>,
    #[schemars(skip)]
    devices: Option<IgnoredAny>,
    #[schemars(skip)]
    service: Option<IgnoredAny>,
}

/// A service name is its alias on the app's network and part of its container's name: a
/// DNS label.
pub(crate) fn valid_service_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-')
}

pub(super) fn command(
    app: &str,
    what: &str,
    c: Option<Vec<String>>,
) -> Result<Option<Vec<String>>, ConfigError> {
    match c {
        Some(c) if c.is_empty() || c[0].is_empty() => Err(ConfigError::Invalid(format!(
            "app `{app}`: {what}command: give the program and its arguments, e.g. [\"/app/worker\", \"--queue\", \"mail\"]"
        ))),
        c => Ok(c),
    }
}

fn bad(app: &str, name: &str, msg: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("app `{app}`: services.{name}: {msg}"))
}

/// The app's further services, each as the primary's settings for that container.
pub(super) fn resolve(
    primary: &AppConfig,
    raw: BTreeMap<String, RawService>,
    base: &Path,
) -> Result<Vec<AppConfig>, ConfigError> {
    if !raw.is_empty() && primary.strategy == Strategy::BlueGreen {
        return Err(ConfigError::Invalid(format!(
            "app `{}`: several services are supported with strategy = \"recreate\" only; \
             a blue-green app has one service",
            primary.name
        )));
    }
    raw.into_iter()
        .map(|(name, s)| s.resolve(primary, name, base))
        .collect()
}

impl RawService {
    /// One service, checked in the order errors have always been reported: its name, its
    /// image, the fields only the primary may have, its limits, env and containment.
    fn resolve(
        self,
        primary: &AppConfig,
        name: String,
        base: &Path,
    ) -> Result<AppConfig, ConfigError> {
        let app = &primary.name;
        check_name(primary, &name)?;
        let image_name = match &self.image {
            Some(i) => ImageName::parse(i).map_err(|e| {
                bad(
                    app,
                    &name,
                    format!("image {e}; it is deployed at the tag the push named for the app"),
                )
            })?,
            None => primary.image_name.clone(),
        };
        self.check_primary_only(app, &name)?;
        if let Some(c) = self.cpus
            && !(c > 0.0 && c <= 1024.0)
        {
            return Err(bad(app, &name, "cpus must be > 0"));
        }
        let mut own_env = BTreeMap::new();
        for (k, v) in self.env {
            let what = format!("apps.{app}.services.{name}.env.{k}");
            own_env.insert(k, Secret::resolve(&what, &v, base)?);
        }
        let own_secrets: Vec<String> = self.secrets.keys().cloned().collect();
        let contained = RawContained {
            service: Some(name.clone()),
            networks: self.networks,
            volumes: self.volumes,
            secrets: self.secrets,
            cap_keep: self.cap_keep,
            read_only: self.read_only,
            tmpfs: self.tmpfs,
            user: self.user,
            // Host paths and port_env are the primary's only (refused above).
            ..RawContained::default()
        }
        .resolve(app, &own_env, base)?;
        let env = inherited_env(&primary.env, own_env, &own_secrets);
        let memory_bytes = self
            .memory
            .map(|m| parse_bytes(&m))
            .transpose()
            .map_err(|e| bad(app, &name, format!("memory: {e}")))?;
        let pids_limit = self.pids_limit.unwrap_or(DEFAULT_PIDS_LIMIT);
        Ok(AppConfig {
            // The primary's ports, exposed but never published: a further service is
            // reached on the app's network only.
            ports: primary.ports.unpublished(),
            publish_public: false,
            health: None,
            route: None,
            env,
            memory_bytes,
            cpus: self.cpus,
            restart: self.restart.unwrap_or_default(),
            stop_timeout: self.stop_timeout.unwrap_or(primary.stop_timeout),
            no_new_privileges: self.no_new_privileges.unwrap_or(true),
            pids_limit: (pids_limit > 0).then_some(pids_limit),
            contained,
            command: command(app, &format!("services.{name}."), self.command)?,
            settle: self.settle.unwrap_or(DEFAULT_SETTLE),
            services: vec![],
            image: self.image.unwrap_or_else(|| primary.image.clone()),
            image_name,
            ..primary.clone()
        })
    }

    /// A further service is not published, has no HTTP health check and mounts no host
    /// paths: each such field is refused by name rather than silently ignored.
    fn check_primary_only(&self, app: &str, name: &str) -> Result<(), ConfigError> {
        let refused = [
            (self.port.is_some(), "port"),
            (self.ports.is_some(), "ports"),
            (self.publish.is_some(), "publish"),
            (self.health.is_some(), "health"),
            (self.port_env.is_some(), "port_env"),
            (self.files.is_some(), "files"),
            (self.binds.is_some(), "binds"),
            (self.devices.is_some(), "devices"),
            (self.service.is_some(), "service"),
        ];
        match refused.iter().find(|(set, _)| *set) {
            Some((_, field)) => Err(bad(
                app,
                name,
                format!(
                    "`{field}` is for the app's primary service only: a further service is not \
                     published, has no HTTP health check and mounts no host paths \
                     (its name is the table's)"
                ),
            )),
            None => Ok(()),
        }
    }
}

/// A DNS label, and not the primary's own service name (its settings are the app's).
fn check_name(primary: &AppConfig, name: &str) -> Result<(), ConfigError> {
    let app = &primary.name;
    if !valid_service_name(name) {
        return Err(bad(
            app,
            name,
            "a service name is a DNS label: lower-case letters, digits and -",
        ));
    }
    if name == primary.contained.service {
        return Err(bad(
            app,
            name,
            format!(
                "`{name}` is the app's primary service (its own settings); name this one \
                 differently or set the app's `service`"
            ),
        ));
    }
    Ok(())
}

/// The app-wide `env` as a further service sees it: every key of the app's, unless the
/// service sets that key itself, in its `env` or its `secrets`. A service's own key wins
/// (a worker may say `ROLE = "worker"` where the app says `"web"`); a secret of the
/// service never stands beside an inherited plain value of the same key, since the
/// container would then get the key twice and which one applies would be the engine's
/// choice.
fn inherited_env(
    app: &BTreeMap<String, Secret>,
    own: BTreeMap<String, Secret>,
    own_secrets: &[String],
) -> BTreeMap<String, Secret> {
    let mut env: BTreeMap<String, Secret> = app
        .iter()
        .filter(|(k, _)| !own_secrets.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(own);
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = r#"
        [server]
        database_url = "postgres://localhost/pier"
        [[apps]]
        name = "shop"
        image = "127.0.0.1:5000/demo/shop"
        port = 8080
        publish = "127.0.0.1:8081"
        health = { path = "/health" }
        service = "web"
        env = { GREETING = "hello" }
        memory = "256m"
    "#;

    fn parse(extra: &str) -> Result<Config, String> {
        Config::parse(&format!("{APP}{extra}"), Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_service_is_the_apps_image_with_its_own_command_env_and_limits() {
        let c = parse(
            "[apps.services.worker]\ncommand = [\"/app/worker\", \"--queue\", \"mail\"]\n\
             env = { ROLE = \"worker\" }\nmemory = \"64m\"\nsettle = \"5s\"\n",
        )
        .unwrap();
        let app = &c.apps[0];
        assert_eq!(app.service_names(), ["web", "worker"]);
        let w = &app.services[0];
        assert_eq!(w.name, "shop");
        assert_eq!(w.image, app.image);
        assert_eq!(w.contained.service, "worker");
        assert_eq!(w.command.as_deref().unwrap()[0], "/app/worker");
        assert_eq!(
            w.env.keys().collect::<Vec<_>>(),
            ["GREETING", "ROLE"],
            "the app-wide env is inherited"
        );
        assert_eq!(w.memory_bytes, Some(64 << 20));
        assert_eq!(w.settle, Duration::from_secs(5));
        assert!(w.health.is_none() && w.publish().is_none() && w.services.is_empty());
        assert!(w.no_new_privileges);
    }

    #[test]
    fn a_further_service_inherits_the_app_wide_env_and_its_own_keys_win() {
        // SAFETY: only this test reads this variable.
        unsafe { std::env::set_var("PIER_TEST_SERVICE_TOKEN", "s3cret") };
        let c = parse(
            "[apps.services.worker]\nenv = { GREETING = \"hi from the worker\", ROLE = \"worker\" }\n\
             [apps.services.mailer]\nsecrets = { GREETING = \"env:PIER_TEST_SERVICE_TOKEN\" }\n\
             [apps.services.plain]\n",
        )
        .unwrap();
        let app = &c.apps[0];
        let by_name = |n: &str| {
            app.services
                .iter()
                .find(|s| s.contained.service == n)
                .unwrap()
        };
        let worker = &by_name("worker").env;
        assert_eq!(worker["GREETING"].expose(), "hi from the worker");
        assert_eq!(worker["ROLE"].expose(), "worker");
        let plain = &by_name("plain").env;
        assert_eq!(plain.keys().collect::<Vec<_>>(), ["GREETING"]);
        assert_eq!(plain["GREETING"].expose(), "hello");
        // A service's secret of the same key replaces the inherited plain value.
        let mailer = by_name("mailer");
        assert!(!mailer.env.contains_key("GREETING"), "{:?}", mailer.env);
        assert_eq!(
            mailer.contained.secrets["GREETING"]
                .loaded()
                .unwrap()
                .expose(),
            "s3cret"
        );
        // The primary keeps its own env only.
        assert_eq!(app.env.keys().collect::<Vec<_>>(), ["GREETING"]);
    }

    #[test]
    fn combinations_a_service_cannot_have_are_refused_with_the_reason() {
        let cases = [
            ("[apps.services.Worker]\n", "DNS label"),
            ("[apps.services.-w]\n", "DNS label"),
            ("[apps.services.web]\n", "primary service"),
            (
                "[apps.services.worker]\nport = 9000\n",
                "`port` is for the app's primary",
            ),
            (
                "[apps.services.worker]\nhealth = { path = \"/h\" }\n",
                "`health`",
            ),
            (
                "[apps.services.worker]\npublish = \"127.0.0.1:9\"\n",
                "`publish`",
            ),
            (
                "[apps.services.worker]\nbinds = [{ source = \"/srv\", target = \"/s\" }]\n",
                "`binds`",
            ),
            (
                "[apps.services.worker]\nimage = \"127.0.0.1:5000/demo/other:v2\"\n",
                "without tag",
            ),
            (
                "[apps.services.worker]\nimage = \"Worker\"\n",
                "not an image reference",
            ),
            ("[apps.services.worker]\ncommand = []\n", "command"),
        ];
        for (extra, want) in cases {
            let e = parse(extra).unwrap_err();
            assert!(e.contains(want), "{extra}: {e}");
        }
        // The app's own repository, named again, is fine; so is another one.
        let c = parse("[apps.services.worker]\nimage = \"127.0.0.1:5000/demo/shop\"\n").unwrap();
        assert!(!c.apps[0].own_image(&c.apps[0].services[0]));
        let c = parse("[apps.services.worker]\nimage = \"127.0.0.1:5000/demo/worker\"\n").unwrap();
        let w = &c.apps[0].services[0];
        assert_eq!(w.image, "127.0.0.1:5000/demo/worker");
        assert_eq!(w.tag, c.apps[0].tag);
        assert!(c.apps[0].own_image(w));
    }

    #[test]
    fn a_blue_green_app_with_several_services_is_refused() {
        let text = format!(
            "{}\nstrategy = \"blue-green\"\n[apps.services.worker]\n[apps.route]\nlisten = \"127.0.0.1:9000\"\n",
            APP.replace("publish = \"127.0.0.1:8081\"\n", "")
        );
        let e = Config::parse(&text, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"recreate\" only"), "{e}");
    }
}
