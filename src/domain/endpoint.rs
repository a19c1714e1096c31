//! How Pier reaches one Docker engine: a local socket, TCP with TLS client certificates
//! checked against a CA (as `docker --tlsverify` does), or SSH with the host key checked
//! against a known-hosts file. Parsed once at load, so a target that cannot be reached
//! safely stops Pier with the field named instead of failing at the first deployment.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// No address given: `DOCKER_HOST` or the platform's default socket (the `local`
    /// target of a config without `[[targets]]`).
    Default,
    /// `unix:///run/docker.sock`.
    Unix(PathBuf),
    /// `tcp://host:port`. Without `tls` only for the `local` target's `server.docker_host`,
    /// as configs written before targets existed may say: a remote engine's API is root on
    /// its host, so a `[[targets]]` entry over TCP must verify both sides.
    Tcp {
        host: String,
        port: u16,
        tls: Option<TlsFiles>,
    },
    Ssh(SshEndpoint),
}

/// PEM files: the CA that signed the engine's certificate, and Pier's client pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshEndpoint {
    pub user: Option<String>,
    pub host: String,
    pub port: u16,
    /// The only keys the host may present; an unknown key is refused, never added.
    pub known_hosts: PathBuf,
    /// The private key Pier signs in with; `None`: the SSH agent or ssh's defaults.
    pub identity: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "`{0}` is not an engine address: use unix:///path, tcp://host:port or ssh://[user@]host[:port]"
    )]
    Scheme(String),
    #[error("`{0}` names no host")]
    NoHost(String),
    #[error("port `{0}` is not a number from 1 to 65535")]
    Port(String),
    #[error("a tcp:// engine needs `tls = {{ ca, cert, key }}`: its API is root on that host")]
    TcpWithoutTls,
    #[error(
        "an ssh:// engine needs `ssh = {{ known_hosts = \"...\" }}`: an unknown host key is never accepted"
    )]
    SshWithoutKnownHosts,
    #[error("`tls` is only for tcp:// engines")]
    TlsNotTcp,
    #[error("`ssh` is only for ssh:// engines")]
    SshNotSsh,
}

/// What a `[[targets]]` entry says besides its address.
#[derive(Debug, Clone, Default)]
pub struct EndpointOptions {
    pub tls: Option<TlsFiles>,
    pub known_hosts: Option<PathBuf>,
    pub identity: Option<PathBuf>,
    /// `server.docker_host` as configs before targets wrote it: plain TCP is allowed.
    pub legacy_plain_tcp: bool,
}

impl Endpoint {
    pub(crate) fn parse(address: &str, options: EndpointOptions) -> Result<Self, EndpointError> {
        let scheme_err = || EndpointError::Scheme(address.to_owned());
        let (scheme, rest) = address.split_once("://").ok_or_else(scheme_err)?;
        let ssh_given = options.known_hosts.is_some() || options.identity.is_some();
        if options.tls.is_some() && scheme != "tcp" {
            return Err(EndpointError::TlsNotTcp);
        }
        if ssh_given && scheme != "ssh" {
            return Err(EndpointError::SshNotSsh);
        }
        match scheme {
            "unix" if !rest.is_empty() => Ok(Endpoint::Unix(PathBuf::from(rest))),
            "unix" => Err(EndpointError::NoHost(address.to_owned())),
            "tcp" => {
                let (host, port) = host_port(address, rest, 2376)?;
                if options.tls.is_none() && !options.legacy_plain_tcp {
                    return Err(EndpointError::TcpWithoutTls);
                }
                Ok(Endpoint::Tcp {
                    host,
                    port,
                    tls: options.tls,
                })
            }
            "ssh" => {
                let (user, hostport) = match rest.rsplit_once('@') {
                    Some((u, h)) if !u.is_empty() => (Some(u.to_owned()), h),
                    _ => (None, rest),
                };
                let (host, port) = host_port(address, hostport, 22)?;
                Ok(Endpoint::Ssh(SshEndpoint {
                    user,
                    host,
                    port,
                    known_hosts: options
                        .known_hosts
                        .ok_or(EndpointError::SshWithoutKnownHosts)?,
                    identity: options.identity,
                }))
            }
            _ => Err(scheme_err()),
        }
    }

    /// Whether containers published on this engine are on this machine's loopback, where
    /// Pier itself can probe them. Only a local socket says so: a TCP or SSH engine is
    /// another host, even when its address is this one's.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Endpoint::Default | Endpoint::Unix(_))
    }
}

fn host_port(address: &str, rest: &str, default: u16) -> Result<(String, u16), EndpointError> {
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Err(EndpointError::NoHost(address.to_owned()));
    }
    // `[::1]:2376` or `host:2376` or `host`.
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| EndpointError::NoHost(address.to_owned()))?;
        (h, after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err(EndpointError::NoHost(address.to_owned()));
    }
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| EndpointError::Port(p.to_owned()))?,
    };
    Ok((host.to_owned(), port))
}

/// The address as an operator wrote it, without the paths of key files.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Default => {
                f.write_str("the default engine (DOCKER_HOST or the local socket)")
            }
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Tcp { host, port, tls } => {
                let h = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                write!(
                    f,
                    "tcp://{h}:{port}{}",
                    if tls.is_some() { " (TLS)" } else { "" }
                )
            }
            Endpoint::Ssh(s) => match &s.user {
                Some(u) => write!(f, "ssh://{u}@{}:{}", s.host, s.port),
                None => write!(f, "ssh://{}:{}", s.host, s.port),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> TlsFiles {
        TlsFiles {
            ca: "/ca.pem".into(),
            cert: "/cert.pem".into(),
            key: "/key.pem".into(),
        }
    }

    #[test]
    fn each_scheme_parses_with_what_it_needs() {
        assert_eq!(
            Endpoint::parse("unix:///run/docker.sock", EndpointOptions::default()),
            Ok(Endpoint::Unix("/run/docker.sock".into()))
        );
        let tcp = Endpoint::parse(
            "tcp://10.0.0.2:2376",
            EndpointOptions {
                tls: Some(tls()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(tcp.to_string(), "tcp://10.0.0.2:2376 (TLS)");
        let ssh = Endpoint::parse(
            "ssh://deploy@edge-1",
            EndpointOptions {
                known_hosts: Some("/etc/pier/known_hosts".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(ssh.to_string(), "ssh://deploy@edge-1:22");
        assert!(!ssh.is_local() && !tcp.is_local());
    }

    #[test]
    fn a_remote_engine_without_its_checks_is_refused() {
        let none = EndpointOptions::default;
        assert_eq!(
            Endpoint::parse("tcp://10.0.0.2:2376", none()),
            Err(EndpointError::TcpWithoutTls)
        );
        assert_eq!(
            Endpoint::parse("ssh://edge-1", none()),
            Err(EndpointError::SshWithoutKnownHosts)
        );
        assert!(matches!(
            Endpoint::parse("http://edge-1", none()),
            Err(EndpointError::Scheme(_))
        ));
        assert!(matches!(
            Endpoint::parse(
                "tcp://edge-1:99999",
                EndpointOptions {
                    tls: Some(tls()),
                    ..none()
                }
            ),
            Err(EndpointError::Port(_))
        ));
        assert_eq!(
            Endpoint::parse(
                "unix:///s",
                EndpointOptions {
                    tls: Some(tls()),
                    ..none()
                }
            ),
            Err(EndpointError::TlsNotTcp)
        );
    }

    #[test]
    fn the_legacy_docker_host_may_be_plain_tcp() {
        let legacy = EndpointOptions {
            legacy_plain_tcp: true,
            ..Default::default()
        };
        assert_eq!(
            Endpoint::parse("tcp://[::1]:2375", legacy),
            Ok(Endpoint::Tcp {
                host: "::1".into(),
                port: 2375,
                tls: None
            })
        );
    }
}
