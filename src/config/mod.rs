//! `pier.toml`: parsed, secrets resolved and every cross-reference checked at start-up, so
//! that a typo fails loudly before any webhook is accepted.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Why a config cannot be used. Each variant's message carries its whole cause in its
/// text, and none has a `source()`: the reload error on the status page shows `to_string()`,
/// and a chain printed with `{:#}` or [`crate::error::error_chain`] shows each cause once.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("parse {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("secret {what}: environment variable {name} is not set")]
    MissingEnv { what: String, name: String },
    #[error("secret {what}: read {}: {cause}", path.display())]
    SecretFile {
        what: String,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
}

/// A value the config may not hold, said in words that name the field.
fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// A secret's value. Never printed: `Debug` shows only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String, Origin);

/// Where a value came from: a reference (`env:`, `file:`) marks it as secret for certain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Origin {
    Inline,
    Reference,
}

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into(), Origin::Inline)
    }
    /// A value read from where a reference pointed (an `age:` file at deploy time).
    pub(crate) fn reference(value: impl Into<String>) -> Self {
        Self(value.into(), Origin::Reference)
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
    pub(crate) fn origin(&self) -> Origin {
        self.1
    }
    /// `env:NAME` reads an environment variable, `file:PATH` a file (trailing newline
    /// dropped); anything else is the value itself.
    pub(crate) fn resolve(what: &str, spec: &str, base: &Path) -> Result<Self, ConfigError> {
        if let Some(name) = spec.strip_prefix("env:") {
            return std::env::var(name)
                .map(|v| Secret(v, Origin::Reference))
                .map_err(|_| ConfigError::MissingEnv {
                    what: what.to_owned(),
                    name: name.to_owned(),
                });
        }
        if let Some(path) = spec.strip_prefix("file:") {
            let path = base.join(path);
            return std::fs::read_to_string(&path)
                .map(|s| {
                    Secret(
                        s.trim_end_matches(['\n', '\r']).to_owned(),
                        Origin::Reference,
                    )
                })
                .map_err(|cause| ConfigError::SecretFile {
                    what: what.to_owned(),
                    path,
                    cause,
                });
        }
        Ok(Secret(spec.to_owned(), Origin::Inline))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub proxy: ProxyConfig,
    pub retention: RetentionConfig,
    pub registries: Vec<RegistryConfig>,
    pub sources: Vec<SourceConfig>,
    pub apps: Vec<AppConfig>,
    /// `[policy]`: the host paths each app may use.
    pub policy: Policy,
    /// Where deployment outcomes are sent (`[[notifications]]`).
    pub notifications: Vec<NotificationConfig>,
    /// Where apps run: `local` (from `server.docker_host`) and every `[[targets]]` entry.
    pub targets: Vec<TargetConfig>,
    /// `[[trust]]`: the keys that sign which repositories' images.
    pub trust: Vec<TrustEntry>,
    /// `[[admins]]`: named admins, each with their own secret.
    pub admins: Vec<NamedAdmin>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// `database_url`, or the entries of `database_urls`: Postgres URLs, each maybe naming
    /// several hosts; Pier uses the one that accepts writes (`store::cluster`).
    pub database: Vec<Secret>,
    pub admin_token: Option<Secret>,
    pub docker_host: Option<String>,
    pub workers: usize,
    pub lease: Duration,
    pub sweep_interval: Duration,
    /// Resource use is sampled this often, while a page, the API or a scrape wants it
    /// (see `background/stats/`).
    pub stats_interval: Duration,
    pub max_body_bytes: usize,
    /// A client's whole request head, and a kept-alive connection's idle time.
    pub header_timeout: Duration,
    /// A whole request, body included, from its head to the answer.
    pub request_timeout: Duration,
    pub max_connections: usize,
    /// Webhook body bytes held in memory at once, all requests together; beyond it a
    /// webhook gets 503 (the sender retries).
    pub webhook_buffer_bytes: usize,
    /// Deadlines and caps for a registry that has no `[[registries]]` entry, and the
    /// defaults of those that do.
    pub registry_limits: RegistryLimits,
    /// Transient registry and engine errors in a step are retried until this much time has
    /// passed; a step then fails instead of holding its app.
    pub retry_budget: Duration,
    /// One pull (or archive load) as a whole, its progress stream included: an engine
    /// that stalls mid-pull fails the attempt here, and the retry budget decides the rest.
    pub pull_timeout: Duration,
    /// Sign-in to the status page: sessions, the admin password, cross-site checks.
    pub sign_in: SignInConfig,
    /// Where apps' private networks get their `/27`s; `None`: the engine's default pools.
    pub app_subnets: Option<SubnetPool>,
    /// Proxies in front of Pier whose forwarding header names the client, for the brakes
    /// and the logs; an empty list trusts no header.
    pub trusted_proxies: TrustedProxies,
    /// The X25519 identity that decrypts apps' `age:` secrets at each deployment.
    pub age_identity: Option<Secret>,
    /// The engine host's directory (on a tmpfs) under which each container's secret
    /// files live, bound at `/run/secrets`.
    pub secrets_dir: PathBuf,
}

impl ServerConfig {
    /// The database URLs as given, for `Store::connect_lazy_many`.
    pub fn database_urls(&self) -> Vec<&str> {
        self.database.iter().map(Secret::expose).collect()
    }
}

#[derive(Debug, Clone)]
pub struct RegistryConfig {
    pub host: String,
    pub insecure: bool,
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub limits: RegistryLimits,
}

/// What Pier allows one registry, on every request it makes to it (manifests and the token
/// realm alike). Without them a registry that trickles its answer holds a deployment past
/// its retry budget, and one that sends an endless manifest takes Pier's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryLimits {
    /// To open the TCP connection (and finish TLS).
    pub connect_timeout: Duration,
    /// From sending the request to the answer's head; also the longest pause between two
    /// reads of its body.
    pub first_byte_timeout: Duration,
    /// From sending the request to the last byte of the answer.
    pub timeout: Duration,
    /// Largest manifest or index accepted; a bigger one fails the resolve for good.
    pub max_manifest_bytes: usize,
}

impl Default for RegistryLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            max_manifest_bytes: 4 << 20,
        }
    }
}

pub use crate::domain::tags::{TagRule, glob_match, tag_version};
pub use notify::{
    Destination, DigestEvery, DigestSchedule, EmailChannel, NotificationConfig, NotifyFormat,
    RateLimit, SmtpTls, WebhookKeyError, standard_webhooks_key,
};
pub use proxy::{ProxyConfig, RouteConfig, TlsFiles};
pub use signin::SignInConfig;
pub use source::{ArtifactoryAccess, HmacKey, SourceConfig, SourceKind, SourceMode};
pub use trusted::{ClientIpHeader, TrustedProxies, TrustedProxyError};

#[derive(
    serde::Serialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Stop the old container, start the new one on the same fixed host port, health-check
    /// it; on failure the old one is started again.
    #[default]
    Recreate,
    /// Start the new one beside the old on an ephemeral loopback port, then switch Pier's
    /// proxy to it, drain, soak, retire.
    BlueGreen,
}

/// What the engine does when the app's container exits. Parsed once, at load: a typo is a
/// config error, never a silent default.
#[derive(
    serde::Serialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    No,
    Always,
    OnFailure,
    #[default]
    UnlessStopped,
}

impl RestartPolicy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::Always => "always",
            Self::OnFailure => "on-failure",
            Self::UnlessStopped => "unless-stopped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    pub path: String,
    pub timeout: Duration,
    /// Fields (dotted paths) the JSON body must have, with these values.
    pub json: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct AppConfig {
    pub name: crate::domain::AppName,
    /// The repository as written, no tag: `127.0.0.1:5000/demo/web`, `acme/web`. Given
    /// to the engine as it is; what it means is [`AppConfig::image_name`].
    pub image: String,
    /// `image` parsed by the distribution grammar: its registry and repository.
    pub image_name: crate::domain::image::ImageName,
    /// The rule's text (`main`, `v1.*`, `>=1.2, <2`), as the pages show it. Only an exact
    /// rule's text is a tag that can be resolved: see [`TagRule::fixed`].
    pub tag: String,
    pub rule: TagRule,
    /// How often the reconcile poller asks the registry what the app follows; `None` is
    /// off. Default: off when some webhook source covers the app's registry, else
    /// [`app::DEFAULT_POLL`].
    pub poll: Option<Duration>,
    /// `poll` was written in the file (then no default applies).
    pub poll_explicit: bool,
    /// Its container's ports, TCP and UDP; one of them the HTTP port (see [`Ports`]).
    pub ports: Ports,
    /// The admin said `publish_public = true`: a `publish` may be on every interface.
    pub publish_public: bool,
    pub health: Option<HealthConfig>,
    pub env: BTreeMap<String, Secret>,
    pub memory_bytes: Option<i64>,
    pub cpus: Option<f64>,
    pub restart: RestartPolicy,
    pub strategy: Strategy,
    pub stop_timeout: Duration,
    /// Processes in the container cannot gain privileges (setuid, file capabilities).
    pub no_new_privileges: bool,
    /// Most processes and threads the container may have; `None` is no limit.
    pub pids_limit: Option<i64>,
    /// Blue-green apps: how the proxy reaches them.
    pub route: Option<RouteConfig>,
    /// Network, volumes, secrets, host mounts, hardening.
    pub contained: Contained,
    /// Replaces the image's entrypoint and command when set.
    pub command: Option<Vec<String>>,
    /// Without an HTTP or image health check: how long the container must keep running.
    pub settle: Duration,
    /// The app's further services, each as this app's settings for that service's
    /// container (same name, image and tag; its own `contained.service`, command, env,
    /// limits; no port, health or route). Empty for a one-service app and inside a service.
    pub services: Vec<AppConfig>,
    /// The targets this app runs on, by name, in rollout order (default `["local"]`).
    pub targets: Vec<String>,
    pub rollout: Rollout,
    /// The keys its image must be signed by (`require_signature`, or a `[[trust]]` entry
    /// that covers it); `None`: no signature is checked.
    pub signature: Option<std::sync::Arc<crate::signature::Policy>>,
    /// Approvals and deploy windows.
    pub gates: Gates,
    /// On a `kind = "swarm"` target: the service's replicas, update and placement.
    pub swarm: Option<SwarmApp>,
}

impl AppConfig {
    /// The registry of `image` as `docker pull` reads it (`127.0.0.1:5000`, `docker.io`).
    pub(crate) fn registry_host(&self) -> &str {
        self.image_name.registry()
    }
    /// The repository path inside the registry (`demo/web`, `library/nginx`).
    pub(crate) fn repository(&self) -> &str {
        self.image_name.repository()
    }
    /// Whether the further service `svc` of this app runs an image of its own repository
    /// (resolved, pulled and verified on its own) rather than the app's digest.
    pub(crate) fn own_image(&self, svc: &AppConfig) -> bool {
        svc.image_name != self.image_name
    }
    /// The HTTP port inside the container: what `pier proxy` routes to, `port_env` names
    /// and the health check asks.
    pub fn port(&self) -> u16 {
        self.ports.http().container
    }
    /// The HTTP port's fixed host address (recreate), which the health check probes.
    pub fn publish(&self) -> Option<SocketAddr> {
        self.ports.http().publish
    }
    /// The first fixed host address on every interface of the host (`0.0.0.0`, `[::]`):
    /// reachable by anyone who reaches the host, past any proxy in front of it. Only with
    /// `publish_public`.
    pub(crate) fn public_publish(&self) -> Option<SocketAddr> {
        self.ports
            .iter()
            .filter_map(|p| p.publish)
            .find(|a| a.ip().is_unspecified())
    }
    /// Published on every interface of the host, by any of its ports.
    #[cfg(test)]
    pub(crate) fn published_publicly(&self) -> bool {
        self.public_publish().is_some()
    }
    /// Every value of this app and its further services that came from a secret reference
    /// (`env:`, `file:`): what is masked wherever the app's output is shown.
    pub(crate) fn secret_values(&self) -> Vec<&str> {
        std::iter::once(self)
            .chain(&self.services)
            .flat_map(|a| {
                a.env
                    .values()
                    .filter(|v| v.origin() == Origin::Reference)
                    .chain(a.contained.secrets.values().filter_map(AppSecret::loaded))
            })
            .map(Secret::expose)
            .collect()
    }

    /// The primary service's name, then the others', in the order they are deployed.
    pub(crate) fn service_names(&self) -> Vec<&str> {
        std::iter::once(self.contained.service.as_str())
            .chain(self.services.iter().map(|s| s.contained.service.as_str()))
            .collect()
    }
}

impl Config {
    pub(crate) fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            path: path.to_owned(),
            cause,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    pub fn parse(text: &str, base: &Path) -> Result<Self, ConfigError> {
        let raw: raw::Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        raw.resolve(base)
    }

    pub(crate) fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name)
    }

    pub(crate) fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }
}

mod age;
mod app;
mod contained;
mod doc_types;
mod gates;
mod windows;
pub use gates::{Approval, Gates, NamedAdmin, Promotion};
pub use windows::{Window, WindowError, next_opening};
mod live;
mod policy;
mod subnets;
mod swarm;
pub use swarm::{FailureAction, Placement, SwarmApp, SwarmMode, UpdateOrder, UpdatePolicy};
mod tmpfs;
pub use age::{AgeError, MAX_AGE_FILE};
pub use contained::{Contained, DEFAULT_CAP_KEEP, HostMount, VolumeMount};
mod secrets;
pub use live::LiveConfig;
pub use secrets::{AgeRef, AppSecret, SecretAs, SecretFrom};
pub use subnets::{APP_SUBNET_PREFIX, SubnetError, SubnetPool};
pub use tmpfs::{DEFAULT_TMPFS_MODE, TmpfsMode, TmpfsModeError, TmpfsMount, TmpfsOwner};
mod notify;
pub use policy::{Policy, Refused};
mod ports;
pub use ports::{PortConfig, Ports, Protocol};
mod proxy;
mod raw;
mod reference;
pub use reference::{reference_markdown, undocumented_fields};
mod retention;
mod schema;
pub use schema::{json_schema, json_schema_text};
mod server;
mod services;
pub use retention::RetentionConfig;
mod signin;
mod size;
pub use size::{SizeError, parse_bytes};
mod source;
mod targets;
mod trust;
mod trusted;
pub use app::DEFAULT_POLL;
pub use targets::{Batch, LOCAL, Rollout, TargetConfig, TargetKind};
pub use trust::TrustEntry;

#[cfg(test)]
mod tests;
