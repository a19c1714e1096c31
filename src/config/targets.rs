//! `[[targets]]`: where apps run. A target is one Docker engine, reached over a local
//! socket, TCP with TLS client certificates, or SSH with a checked host key. Without any
//! entry there is one target, `local`, which is `server.docker_host` (or `DOCKER_HOST`): a
//! config written before targets existed loads and deploys as it always has.
//!
//! Target (where a generation runs) and strategy (how it is replaced) are separate axes:
//! nothing here knows about recreate or blue-green.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::domain::{Endpoint, EndpointOptions, TlsFiles};

/// The target an app runs on when it names none, and the name `server.docker_host` gets.
pub const LOCAL: &str = "local";

#[derive(
    serde::Serialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// One Docker engine: Pier creates, starts and retires the containers itself.
    #[default]
    Engine,
    /// A Docker Swarm manager's engine: Pier writes a service's spec and Swarm places and
    /// replaces its tasks.
    Swarm,
}

impl TargetKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TargetKind::Engine => "engine",
            TargetKind::Swarm => "swarm",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub name: String,
    pub kind: TargetKind,
    pub endpoint: Endpoint,
}

/// A Docker engine other than the one beside Pier. Without any entry there is one target,
/// `local`: `server.docker_host` (or `DOCKER_HOST`). The certificate files, `known_hosts`
/// and `identity` are read when Pier starts, so replacing them takes a restart.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTarget {
    /// What apps' `targets` name: lower-case, at most 32 characters; `local` only if
    /// `server.docker_host` is unset.
    name: String,
    /// What the engine is to Pier.
    #[serde(default)]
    kind: TargetKind,
    /// How the engine is reached: `unix:///path`, `tcp://host:port` (default port 2376,
    /// with `tls`) or `ssh://[user@]host[:port]` (default port 22, with `ssh`).
    host: String,
    /// Required for `tcp://`, see `[targets.tls]`.
    tls: Option<RawTls>,
    /// Required for `ssh://`, see `[targets.ssh]`.
    ssh: Option<RawSsh>,
}

/// TLS to an engine over `tcp://`.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    /// The CA (PEM) the engine's certificate must chain to (that CA only, not the system's
    /// roots) while naming the `host`, as `docker --tlsverify` checks it.
    ca: String,
    /// Pier's client certificate (PEM).
    cert: String,
    /// Its private key (PEM).
    key: String,
}

/// SSH to an engine: the system's `ssh` runs `docker system dial-stdio` on the host, with
/// no `ssh_config` read.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSsh {
    /// The only host keys accepted: an unknown or changed key is refused, and nothing is
    /// ever written to this file.
    known_hosts: String,
    /// The private key Pier signs in with.
    ///
    /// Default: the SSH agent and ssh's default keys.
    identity: Option<String>,
}

/// Every target, `local` first. `docker_host` is the old `server.docker_host`: it is the
/// `local` target unless `[[targets]]` declares one named `local` itself (then both at once
/// would be two answers to one question, and is refused).
pub(crate) fn resolve(
    raw: Vec<RawTarget>,
    docker_host: Option<&str>,
    base: &Path,
) -> Result<Vec<TargetConfig>, ConfigError> {
    let mut targets = Vec::with_capacity(raw.len() + 1);
    let declares_local = raw.iter().any(|t| t.name == LOCAL);
    if declares_local && docker_host.is_some() {
        return Err(invalid(format!(
            "server.docker_host and a [[targets]] entry named `{LOCAL}` both say where `{LOCAL}` is: keep one"
        )));
    }
    if !declares_local {
        let endpoint = match docker_host {
            None => Endpoint::Default,
            Some(h) => Endpoint::parse(
                h,
                EndpointOptions {
                    legacy_plain_tcp: true,
                    ..Default::default()
                },
            )
            .map_err(|e| invalid(format!("server.docker_host: {e}")))?,
        };
        targets.push(TargetConfig {
            name: LOCAL.to_owned(),
            kind: TargetKind::Engine,
            endpoint,
        });
    }
    for t in raw {
        if !crate::domain::is_name(&t.name) || t.name.len() > 32 {
            return Err(invalid(format!(
                "target name `{}`: use at most 32 lower-case letters, digits, - and _",
                t.name
            )));
        }
        if targets.iter().any(|o: &TargetConfig| o.name == t.name) {
            return Err(invalid(format!("target `{}` is defined twice", t.name)));
        }
        let options = EndpointOptions {
            tls: t.tls.map(|r| TlsFiles {
                ca: base.join(r.ca),
                cert: base.join(r.cert),
                key: base.join(r.key),
            }),
            known_hosts: t.ssh.as_ref().map(|s| base.join(&s.known_hosts)),
            identity: t
                .ssh
                .as_ref()
                .and_then(|s| s.identity.as_ref())
                .map(|i| base.join(i)),
            legacy_plain_tcp: false,
        };
        let endpoint = Endpoint::parse(&t.host, options)
            .map_err(|e| invalid(format!("targets[{}].host: {e}", t.name)))?;
        targets.push(TargetConfig {
            name: t.name,
            kind: t.kind,
            endpoint,
        });
    }
    Ok(targets)
}

/// How many targets of a rollout change at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    Count(usize),
    /// Of the app's targets, rounded up: never a batch of none.
    Percent(u8),
}

impl Batch {
    /// Targets per batch for an app on `targets` engines: at least one, at most all.
    pub(crate) fn size(self, targets: usize) -> usize {
        let n = match self {
            Batch::Count(n) => n,
            Batch::Percent(p) => (targets * p as usize).div_ceil(100),
        };
        n.clamp(1, targets.max(1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollout {
    pub batch: Batch,
    /// Waited between a healthy batch and the next one.
    pub pause: Duration,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            batch: Batch::Count(1),
            pause: Duration::ZERO,
        }
    }
}

/// How one deployment crosses the app's targets: batch by batch, the next batch starting
/// when the whole batch is healthy and switched. The first failure stops the rollout and
/// puts every engine back on its previous generation.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRollout {
    /// Engines per batch: a count (`1`) or a percentage of the app's targets (`"50%"`).
    ///
    /// Default: `1`.
    #[serde(default)]
    batch: Option<RawBatch>,
    /// Pause between batches; an operator's stop ends it at once.
    ///
    /// Default: `"0s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    pause: Option<Duration>,
}

#[derive(schemars::JsonSchema, Deserialize)]
#[serde(untagged)]
enum RawBatch {
    Count(i64),
    Text(String),
}

/// The longest pause between batches: beyond it an operator wants an approval, not a timer.
const MAX_PAUSE: Duration = Duration::from_secs(24 * 3600);

impl RawRollout {
    pub(crate) fn resolve(self, app: &str) -> Result<Rollout, ConfigError> {
        let bad = |what: String| invalid(format!("app `{app}`: rollout.batch {what}"));
        let batch = match self.batch {
            None => Batch::Count(1),
            Some(RawBatch::Count(n)) if (1..=1000).contains(&n) => Batch::Count(n as usize),
            Some(RawBatch::Count(n)) => return Err(bad(format!("{n} is not from 1 to 1000"))),
            Some(RawBatch::Text(t)) => match t.trim().strip_suffix('%').map(str::trim) {
                Some(p) => match p.parse::<u8>() {
                    Ok(p) if (1..=100).contains(&p) => Batch::Percent(p),
                    _ => return Err(bad(format!("`{t}` is not a percentage from 1% to 100%"))),
                },
                None => return Err(bad(format!("`{t}` is neither a count nor a percentage"))),
            },
        };
        let pause = self.pause.unwrap_or(Duration::ZERO);
        if pause > MAX_PAUSE {
            return Err(invalid(format!(
                "app `{app}`: rollout.pause is at most 24h"
            )));
        }
        Ok(Rollout { batch, pause })
    }
}

/// An app's `targets`, checked against the declared ones: default `["local"]`, no name
/// twice, every name declared.
pub(crate) fn app_targets(
    app: &str,
    names: Option<Vec<String>>,
    targets: &[TargetConfig],
) -> Result<Vec<String>, ConfigError> {
    let names = names.unwrap_or_else(|| vec![LOCAL.to_owned()]);
    if names.is_empty() {
        return Err(invalid(format!(
            "app `{app}`: targets is empty: name at least one (the default is [\"{LOCAL}\"])"
        )));
    }
    for (i, n) in names.iter().enumerate() {
        if !targets.iter().any(|t| &t.name == n) {
            return Err(invalid(format!(
                "app `{app}`: target `{n}` is not declared in [[targets]]"
            )));
        }
        if names[..i].contains(n) {
            return Err(invalid(format!("app `{app}`: target `{n}` is named twice")));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Vec<TargetConfig>, ConfigError> {
        #[derive(Deserialize)]
        struct F {
            #[serde(default)]
            targets: Vec<RawTarget>,
        }
        let f: F = toml::from_str(toml_text).expect("toml");
        resolve(f.targets, None, Path::new("/etc/pier"))
    }

    #[test]
    fn without_targets_there_is_local_alone() {
        let t = parse("").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].name, LOCAL);
        assert_eq!(t[0].endpoint, Endpoint::Default);
    }

    #[test]
    fn a_tls_target_resolves_its_files_beside_the_config() {
        let t = parse(
            r#"[[targets]]
               name = "edge-1"
               host = "tcp://10.0.0.2:2376"
               tls = { ca = "ca.pem", cert = "cert.pem", key = "key.pem" }"#,
        )
        .unwrap();
        assert_eq!(t[0].name, LOCAL);
        let Endpoint::Tcp { tls: Some(tls), .. } = &t[1].endpoint else {
            panic!("{:?}", t[1].endpoint)
        };
        assert_eq!(tls.ca, Path::new("/etc/pier/ca.pem"));
    }

    #[test]
    fn a_remote_target_without_checks_is_refused_with_its_name() {
        let e = parse(
            r#"[[targets]]
               name = "edge-1"
               host = "tcp://10.0.0.2:2376""#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("targets[edge-1].host"), "{e}");
        let e = parse("[[targets]]\nname = \"Bad Name\"\nhost = \"unix:///s\"").unwrap_err();
        assert!(e.to_string().contains("target name"), "{e}");
    }

    #[test]
    fn docker_host_and_a_declared_local_are_refused_together() {
        let raw: Vec<RawTarget> = vec![RawTarget {
            name: LOCAL.into(),
            kind: TargetKind::Engine,
            host: "unix:///s".into(),
            tls: None,
            ssh: None,
        }];
        assert!(resolve(raw, Some("unix:///t"), Path::new("/")).is_err());
    }

    #[test]
    fn batches_are_counts_or_percentages_never_empty() {
        assert_eq!(Batch::Count(1).size(3), 1);
        assert_eq!(Batch::Count(5).size(3), 3);
        assert_eq!(Batch::Percent(50).size(3), 2);
        assert_eq!(Batch::Percent(1).size(3), 1);
        assert_eq!(Batch::Percent(100).size(3), 3);
        let r: RawRollout = toml::from_str("batch = \"34%\"\npause = \"2s\"").unwrap();
        assert_eq!(
            r.resolve("web").unwrap(),
            Rollout {
                batch: Batch::Percent(34),
                pause: Duration::from_secs(2)
            }
        );
        let r: RawRollout = toml::from_str("batch = 0").unwrap();
        assert!(r.resolve("web").is_err());
        let r: RawRollout = toml::from_str("batch = \"lots\"").unwrap();
        assert!(r.resolve("web").is_err());
    }

    #[test]
    fn an_app_names_only_declared_targets_once_each() {
        let t = parse("").unwrap();
        assert_eq!(app_targets("web", None, &t).unwrap(), vec![LOCAL]);
        assert!(app_targets("web", Some(vec!["edge".into()]), &t).is_err());
        assert!(app_targets("web", Some(vec![LOCAL.into(), LOCAL.into()]), &t).is_err());
        assert!(app_targets("web", Some(vec![]), &t).is_err());
    }

    const PLACED: &str = r#"
        [server]
        database_url = "postgres://localhost/pier"
        allow_short_secrets = true
        [[sources]]
        name = "local"
        kind = "distribution"
        token = "placement-test-token-placement-test-token"
        [[targets]]
        name = "edge-1"
        host = "tcp://10.0.0.2:2376"
        tls = { ca = "ca.pem", cert = "cert.pem", key = "key.pem" }
    "#;

    fn placed(app: &str) -> Result<crate::config::Config, ConfigError> {
        crate::config::Config::parse(&format!("{PLACED}\n{app}"), Path::new("/etc/pier"))
    }

    #[test]
    fn an_http_health_check_is_allowed_on_a_remote_target_whose_proxy_probes() {
        let c = placed(
            r#"[[apps]]
               name = "web"
               image = "127.0.0.1:5000/demo/web"
               port = 8080
               publish = "127.0.0.1:8081"
               targets = ["edge-1"]
               health = { path = "/health", timeout = "20s" }"#,
        )
        .expect("an HTTP health check on a remote target loads");
        assert_eq!(c.apps[0].targets, vec!["edge-1"]);
        assert!(c.apps[0].health.is_some());
        // Blue-green on one remote target too: that host's proxy switches.
        placed(
            r#"[[apps]]
               name = "web"
               image = "127.0.0.1:5000/demo/web"
               port = 8080
               strategy = "blue-green"
               targets = ["edge-1"]
               health = { path = "/health", timeout = "20s" }
               [apps.route]
               listen = "127.0.0.1:8090""#,
        )
        .expect("blue-green with HTTP health on one remote target loads");
    }

    #[test]
    fn blue_green_on_several_targets_loads() {
        placed(
            r#"[[apps]]
               name = "web"
               image = "127.0.0.1:5000/demo/web"
               port = 8080
               strategy = "blue-green"
               targets = ["local", "edge-1"]
               [apps.route]
               listen = "127.0.0.1:8090""#,
        )
        .expect("each engine switches through its own host's pier proxy");
    }
}
