//! Pier's own transports to remote engines, under bollard's API: TCP with TLS client
//! certificates checked against the target's CA only, and SSH through the system's `ssh`
//! with the host key checked against the target's known-hosts file only. Both hand bollard
//! HTTP/1.1 connections from one bounded [`pool::Pool`], and both say of every failure
//! whether waiting can fix it ([`Retry`]), so the pipeline retries an engine that is down
//! and fails at once on a refused host key or certificate.

mod pool;
pub(super) mod ssh;
pub(super) mod tls;

use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;

use super::EngineError;

/// Opening one connection: waiting for a free slot, TCP (and TLS or SSH), and the first
/// `/_ping` through it. An engine that does not answer within this is `Unavailable`.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether the pipeline may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Unreachable, down, or every connection busy: the retry budget applies.
    Transient,
    /// One side refused the other (host key, certificate, login) or the target is
    /// misconfigured: trying again changes nothing until an operator does.
    Permanent,
}

/// A failure to reach or talk to a remote engine. The message names the endpoint and
/// files, never their contents.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(super) struct TransportError {
    pub retry: Retry,
    pub message: String,
}

impl TransportError {
    pub(crate) fn transient(message: impl Into<String>) -> Self {
        Self {
            retry: Retry::Transient,
            message: message.into(),
        }
    }

    pub(crate) fn permanent(message: impl Into<String>) -> Self {
        Self {
            retry: Retry::Permanent,
            message: message.into(),
        }
    }

    /// As bollard carries it out of a custom transport, for [`classified`] to find again.
    fn into_docker(self) -> DockerError {
        DockerError::IOError {
            err: std::io::Error::other(self),
        }
    }

    pub(crate) fn into_engine(self, action: impl Into<String>) -> EngineError {
        let action = action.into();
        match self.retry {
            Retry::Transient => EngineError::Unavailable {
                action,
                message: self.message,
            },
            Retry::Permanent => EngineError::Refused {
                action,
                message: self.message,
            },
        }
    }
}

/// Why a target's address or one of its files cannot be used, found when the client is
/// built so that a typo stops Pier with the file named instead of failing every deployment
/// later. Names files, never their contents (a key file's bytes never reach a message).
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    /// A host or user that ssh could read as an option, or as two words.
    #[error("the {what} `{}` is empty, starts with `-` or holds spaces", value.escape_debug())]
    BadWord { what: &'static str, value: String },
    #[error("cannot read the {what} file {}: {source}", path.display())]
    Unreadable {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} file {} is not a file", path.display())]
    NotAFile { what: &'static str, path: PathBuf },
    #[error("the {what} file {} is not PEM", path.display())]
    NotPem { what: &'static str, path: PathBuf },
    #[error("the {what} file {} holds no PEM certificate", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("the CA file {}: {source}", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the client key file {} holds no PEM private key", path.display())]
    NoPrivateKey { path: PathBuf },
    /// rustls has no protocol version its provider supports.
    #[error(transparent)]
    Protocols(rustls::Error),
    /// The client certificate is not the key's: rustls says so without quoting either.
    #[error(
        "the client certificate {} and key {} do not go together: {source}",
        cert.display(),
        key.display()
    )]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

impl EndpointError {
    /// Nothing changes by waiting: the operator must fix the target first.
    pub(crate) fn at(self, target: &str) -> TransportError {
        TransportError::permanent(format!("{target}: {self}"))
    }
}

/// The engine error for a failure one of these transports raised, keeping its class;
/// `None` for every other bollard error.
pub(super) fn classified(action: &str, e: &DockerError) -> Option<EngineError> {
    let DockerError::IOError { err } = e else {
        return None;
    };
    let t = err.get_ref()?.downcast_ref::<TransportError>()?;
    Some(t.clone().into_engine(action))
}

/// A bollard client whose every request goes through `dialer`'s pooled connections.
/// `authority` is what the engine sees as the `Host` of each request.
pub(super) fn docker_over(
    dialer: impl pool::Dialer,
    authority: &str,
    timeout_secs: u64,
) -> Result<Docker, DockerError> {
    let pool = pool::Pool::new(dialer, authority)?;
    Docker::connect_with_custom_transport(
        move |req| {
            let pool = pool.clone();
            async move { pool.send(req).await.map_err(TransportError::into_docker) }
        },
        Some(format!("http://{authority}")),
        timeout_secs,
        bollard::API_DEFAULT_VERSION,
    )
}

/// One line of at most `max` characters, without control characters: what a remote
/// program printed, made safe to put in an error message.
pub(super) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.len() + word.len() + 1 > max {
            out.push('…');
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().filter(|c| !c.is_control()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_failure_keeps_its_class_through_bollard() {
        let refused = TransportError::permanent("host key refused").into_docker();
        assert!(matches!(
            classified("ping", &refused),
            Some(EngineError::Refused { message, .. }) if message == "host key refused"
        ));
        let down = TransportError::transient("connection refused").into_docker();
        assert!(classified("ping", &down).is_some_and(|e| e.is_transient()));
        let other = DockerError::IOError {
            err: std::io::Error::other("unrelated"),
        };
        assert!(classified("ping", &other).is_none());
    }

    #[test]
    fn remote_output_becomes_one_bounded_line() {
        assert_eq!(one_line("a\n  b\tc\r\n", 100), "a b c");
        let long = "word ".repeat(100);
        let line = one_line(&long, 20);
        assert!(line.chars().count() <= 21 && line.ends_with('…'), "{line}");
    }
}
