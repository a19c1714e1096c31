//! The Docker calls Pier makes, and nothing else. Every answer is reduced to the facts the
//! pipeline needs; "not found" is a value, not an error, because replays depend on it.

mod archive;
mod connect;
mod containers;
mod deadline;
mod logs;
mod ports;
mod resources;
mod secret_files;
mod services;
mod stats;
mod transport;
mod view;

use std::collections::HashMap;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::errors::Error as DockerError;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;

use crate::domain::Platform;
pub use containers::{ContainedSpec, ContainerFacts, ContainerSpec, Health, Removed, Stopped};
use deadline::Call;
pub(crate) use logs::{LogLine, LogQuery, LogSource, LogStream, MAX_LINE, at_text};
pub use ports::{Binding, PortSpec};
pub use resources::{
    LABEL_INCARNATION, LABEL_SERVICE, Labelled, ManagedNetwork, NetworkRemoved, VolumeRemoved,
};
pub use secret_files::{FileOwner, SECRETS_TARGET, SecretFile};
pub use services::{
    NodeFacts, NodeRole, NodeStatus, ServiceFacts, TaskFacts, TaskState, UpdateState, UpdateStatus,
};
pub(crate) use stats::{OomKill, Runs, Usage};
pub use view::EngineView;

pub const LABEL_MANAGED: &str = "pier.managed";
pub const LABEL_APP: &str = "pier.app";
pub const LABEL_DEPLOYMENT: &str = "pier.deployment";
pub const LABEL_DIGEST: &str = "pier.digest";
/// The labels by which Pier finds and identifies its containers. Pier sets all of them on
/// every container it creates (a container's labels override its image's), and refuses an
/// image that carries any of them: an image cannot make containers look like Pier's.
pub(crate) const RESERVED_LABELS: [&str; 4] =
    [LABEL_MANAGED, LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST];

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot be reached or answered 5xx: worth retrying.
    #[error("docker engine unavailable during {action}: {message}")]
    Unavailable { action: String, message: String },
    #[error("docker {action}: {message}")]
    Refused { action: String, message: String },
    /// A service update named a version Swarm has moved past ("update out of sequence"):
    /// the spec must be read again; a retry of the same call can never succeed.
    #[error("docker {action}: the service changed since it was read (update out of sequence)")]
    OutOfSequence { action: String },
    /// The engine took the request and gave no answer within the call's deadline (a hung
    /// or overloaded dockerd): worth retrying, within the retry budget.
    #[error("engine {engine} gave no answer to {action} within {}", humantime::format_duration(*after))]
    TimedOut {
        engine: String,
        action: String,
        after: std::time::Duration,
    },
}

impl EngineError {
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            EngineError::Unavailable { .. } | EngineError::TimedOut { .. }
        )
    }

    /// The same failure without the engine's message, which may quote host paths.
    pub(crate) fn redacted(self) -> Self {
        const WITHHELD: &str =
            "details withheld: the request carries host mounts or devices (see the engine's log)";
        match self {
            EngineError::Unavailable { action, .. } => EngineError::Unavailable {
                action,
                message: WITHHELD.into(),
            },
            EngineError::Refused { action, .. } => EngineError::Refused {
                action,
                message: WITHHELD.into(),
            },
            e @ (EngineError::OutOfSequence { .. } | EngineError::TimedOut { .. }) => e,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, EngineError>;

fn err(action: impl Into<String>, e: DockerError) -> EngineError {
    let action = action.into();
    // TLS and SSH transports classified their failures already (a refused host key is
    // permanent, an engine that is down is not).
    if let Some(classified) = transport::classified(&action, &e) {
        return classified;
    }
    match e {
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } if status_code < 500 => EngineError::Refused { action, message },
        DockerError::DockerResponseServerError { message, .. } => {
            EngineError::Unavailable { action, message }
        }
        DockerError::DockerStreamError { error } => EngineError::Refused {
            action,
            message: error,
        },
        // Keep the causes (connection refused, timed out, ...), not just the outer words.
        other => EngineError::Unavailable {
            action,
            message: crate::error::error_chain(&other),
        },
    }
}

fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A local image, as far as the `verify` step cares.
#[derive(Debug, Clone)]
pub struct ImageFacts {
    pub id: String,
    pub repo_digests: Vec<String>,
    pub platform: Platform,
    pub has_healthcheck: bool,
    /// The image's own labels (its config's `Labels`).
    pub labels: HashMap<String, String>,
    /// The image's `USER`, when it sets one: who runs without the app's `user`.
    pub user: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Engine {
    docker: Docker,
    /// Who this engine is in messages: its target's name, else its endpoint.
    name: std::sync::Arc<str>,
    negotiated: std::sync::Arc<tokio::sync::OnceCell<()>>,
    /// `[server] app_subnets`: apps' networks get a `/27` of it instead of one from the
    /// engine's default pools.
    app_subnets: Option<crate::config::SubnetPool>,
}

impl Engine {
    fn from_docker(docker: Docker, name: String) -> Self {
        Self {
            docker,
            name: name.into(),
            negotiated: Default::default(),
            app_subnets: None,
        }
    }

    /// The client, once the engine and Pier agree on an API version. Asked once per
    /// engine and kept; a failure (the engine is down) is asked again by the next call.
    async fn api(&self) -> Result<&Docker> {
        const ACTION: &str = "negotiate API version";
        self.negotiated
            .get_or_try_init(|| {
                // The version atomics are shared by every clone of the client. Bounded as
                // a probe, whatever the call it precedes: a hung engine is found out in
                // seconds, not after a pull's budget.
                self.timed(deadline::Call::Probe, ACTION, async {
                    self.docker
                        .clone()
                        .negotiate_version()
                        .await
                        .map(|_| ())
                        .map_err(|e| err(ACTION, e))
                })
            })
            .await?;
        Ok(&self.docker)
    }

    /// Names this engine in its errors as `name` (its target's name).
    pub(crate) fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Apps' networks take their subnets from `pool` (see [`Engine::create_network`]).
    pub(crate) fn with_app_subnets(mut self, pool: Option<crate::config::SubnetPool>) -> Self {
        self.app_subnets = pool;
        self
    }

    pub async fn ping(&self) -> Result<()> {
        self.call(Call::Probe, "ping", async |d| d.ping().await)
            .await
            .map(drop)
    }

    /// The platform images must be built for to run here.
    pub(crate) async fn platform(&self) -> Result<Platform> {
        let v = self
            .call(Call::Probe, "version", async |d| d.version().await)
            .await?;
        Ok(Platform::from_engine(
            v.os.as_deref().unwrap_or("linux"),
            v.arch.as_deref().unwrap_or("amd64"),
        ))
    }

    /// Pulls `repository@digest`; never by tag, so what lands is what was resolved. The
    /// whole pull, its progress stream included, gets `budget`.
    pub async fn pull(
        &self,
        repository: &str,
        digest: &str,
        credentials: Option<(String, String)>,
        budget: std::time::Duration,
    ) -> Result<()> {
        let options = CreateImageOptionsBuilder::default()
            .from_image(repository)
            .tag(digest)
            .build();
        let creds = docker_credentials(repository, credentials);
        let action = format!("pull {repository}@{digest}");
        self.call(Call::Transfer(budget), &action, async |d| {
            let mut stream = d.create_image(Some(options), None, creds);
            while let Some(item) = stream.next().await {
                item?;
            }
            Ok(())
        })
        .await
    }

    pub async fn image(&self, reference: &str) -> Result<Option<ImageFacts>> {
        let action = format!("inspect image {reference}");
        let found = self
            .call(Call::Read, &action, async |d| {
                not_found_is_none(d.inspect_image(reference).await)
            })
            .await?;
        Ok(found.map(|i| ImageFacts {
            id: i.id.unwrap_or_default(),
            repo_digests: i.repo_digests.unwrap_or_default(),
            platform: Platform {
                os: i.os.unwrap_or_default(),
                architecture: i.architecture.unwrap_or_default(),
                variant: i.variant,
            },
            labels: i
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default(),
            user: i
                .config
                .as_ref()
                .and_then(|c| c.user.clone())
                .filter(|u| !u.is_empty()),
            has_healthcheck: i
                .config
                .and_then(|c| c.healthcheck)
                .and_then(|h| h.test)
                .is_some_and(|t| t.first().is_some_and(|f| f != "NONE")),
        }))
    }
}

/// The engine's 404 as "there is none": replays depend on telling it from a failure.
fn not_found_is_none<T>(
    answer: std::result::Result<T, DockerError>,
) -> std::result::Result<Option<T>, DockerError> {
    match answer {
        Ok(t) => Ok(Some(t)),
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the engine sends to the registry of `image` (`X-Registry-Auth`): the credentials
/// Pier holds for it, addressed to the image's registry host.
fn docker_credentials(
    image: &str,
    credentials: Option<(String, String)>,
) -> Option<DockerCredentials> {
    credentials.map(|(username, password)| DockerCredentials {
        username: Some(username),
        password: Some(password),
        serveraddress: image.split('/').next().map(str::to_owned),
        ..Default::default()
    })
}

/// Filters for containers Pier manages, optionally of one app or one deployment.
pub(crate) fn label_filters(
    app: Option<&str>,
    deployment: Option<&str>,
) -> HashMap<String, Vec<String>> {
    let mut labels = vec![format!("{LABEL_MANAGED}=true")];
    if let Some(a) = app {
        labels.push(format!("{LABEL_APP}={a}"));
    }
    if let Some(d) = deployment {
        labels.push(format!("{LABEL_DEPLOYMENT}={d}"));
    }
    HashMap::from([("label".to_owned(), labels)])
}
