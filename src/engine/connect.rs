//! From an [`Endpoint`] to a client. Building one sends nothing: the first call agrees on
//! an API version (see [`Engine::api`]), so an engine that is down when Pier starts delays
//! only the deployments and pages that need it, never Pier itself or the other engines.

use bollard::Docker;

use super::{Endpoint, Engine, EngineError, Result, err};

/// Seconds every request to an engine may take (bollard's per-request timeout). Pulls
/// stream and are bounded by this per read, not as a whole.
const REQUEST_TIMEOUT_SECS: u64 = 120;

impl Engine {
    /// A client for `endpoint`, not yet connected.
    pub fn for_endpoint(endpoint: &Endpoint) -> Result<Self> {
        let docker = client(endpoint)?;
        Ok(Self::from_docker(docker))
    }

    /// Connects to `host` (`unix:///…`, `tcp://…`) or, without one, to `DOCKER_HOST` or
    /// the platform default, and agrees on an API version now: for the tools that talk to
    /// the local engine once and want its error at once.
    pub async fn connect(host: Option<&str>) -> Result<Self> {
        let endpoint = match host {
            None => Endpoint::Default,
            Some(h) => Endpoint::parse(
                h,
                super::EndpointOptions {
                    legacy_plain_tcp: true,
                    ..Default::default()
                },
            )
            .map_err(|e| EngineError::Refused {
                action: "connect".into(),
                message: e.to_string(),
            })?,
        };
        let engine = Self::for_endpoint(&endpoint)?;
        engine.api().await?;
        Ok(engine)
    }
}

fn client(endpoint: &Endpoint) -> Result<Docker> {
    let docker = match endpoint {
        Endpoint::Default => Docker::connect_with_defaults(),
        Endpoint::Unix(path) => Docker::connect_with_unix(
            &path.to_string_lossy(),
            REQUEST_TIMEOUT_SECS,
            bollard::API_DEFAULT_VERSION,
        ),
        Endpoint::Tcp {
            host,
            port,
            tls: None,
        } => Docker::connect_with_http(
            &format!("tcp://{}:{port}", bracketed(host)),
            REQUEST_TIMEOUT_SECS,
            bollard::API_DEFAULT_VERSION,
        ),
        Endpoint::Tcp { tls: Some(_), .. } | Endpoint::Ssh(_) => {
            return Err(EngineError::Refused {
                action: "connect".into(),
                message: format!("{endpoint}: this transport is not built yet"),
            });
        }
    };
    docker.map_err(|e| err("connect", e))
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}
