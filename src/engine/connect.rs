//! From an [`Endpoint`] to a client. Building one sends nothing: the first call agrees on
//! an API version (see [`Engine::api`]), so an engine that is down when Pier starts delays
//! only the deployments and pages that need it, never Pier itself or the other engines.

use bollard::Docker;

use super::transport::{self, ssh::SshDialer, tls::TlsDialer};
use super::{Engine, EngineError, Result, err};
use crate::domain::Endpoint;

/// Seconds every request to an engine may take (bollard's per-request timeout). Pulls
/// stream and are bounded by this per read, not as a whole.
const REQUEST_TIMEOUT_SECS: u64 = 120;

impl Engine {
    /// A client for `endpoint`, not yet connected. Its files (TLS certificates and key,
    /// known_hosts, SSH identity) are read or checked now: one that is missing or broken
    /// is an error naming that file, never a failure at the first deployment.
    pub fn for_endpoint(endpoint: &Endpoint) -> Result<Self> {
        let docker = client(endpoint)?;
        Ok(Self::from_docker(docker, endpoint.to_string()))
    }

    /// Connects to `host` (`unix:///…`, `tcp://…`) or, without one, to `DOCKER_HOST` or
    /// the platform default, and agrees on an API version now: for the tools that talk to
    /// the local engine once and want its error at once.
    pub async fn connect(host: Option<&str>) -> Result<Self> {
        let endpoint = match host {
            None => Endpoint::Default,
            Some(h) => Endpoint::parse(
                h,
                crate::domain::EndpointOptions {
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
        Endpoint::Tcp {
            host,
            port,
            tls: Some(files),
        } => {
            let dialer = TlsDialer::new(host, *port, files, endpoint.to_string())
                .map_err(|e| e.into_engine("connect"))?;
            transport::docker_over(
                dialer,
                &format!("{}:{port}", bracketed(host)),
                REQUEST_TIMEOUT_SECS,
            )
        }
        Endpoint::Ssh(ssh) => {
            let dialer =
                SshDialer::new(ssh, endpoint.to_string()).map_err(|e| e.into_engine("connect"))?;
            // The remote `dial-stdio` ignores the Host; this one says what it is.
            transport::docker_over(dialer, "docker.ssh", REQUEST_TIMEOUT_SECS)
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
