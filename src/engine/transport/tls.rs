//! `tcp://` with TLS, checked as `docker --tlsverify` checks it: the engine's certificate
//! must chain to the target's CA (that CA only, not the system's roots) and name the host
//! Pier dials (its DNS name or IP address); Pier presents its client certificate, which
//! the engine checks against its own CA. The files are read once, when the client is
//! built, so a missing or broken one stops Pier with the file named instead of failing
//! every deployment later.

use std::io;
use std::path::Path;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::pool::{Dialed, Dialer};
use super::{CONNECT_TIMEOUT, EndpointError, TransportError};
use crate::domain::TlsFiles;

pub(crate) struct TlsDialer {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    target: String,
}

impl TlsDialer {
    /// Reads and checks the target's three files; `target` is the endpoint as shown.
    pub(crate) fn new(
        host: &str,
        port: u16,
        files: &TlsFiles,
        target: String,
    ) -> Result<Self, TransportError> {
        let server_name = ServerName::try_from(host.to_owned()).map_err(|_| {
            TransportError::permanent(format!(
                "{target}: `{host}` is neither a DNS name nor an IP address"
            ))
        })?;
        let config = client_config(files).map_err(|e| e.at(&target))?;
        Ok(Self {
            host: host.to_owned(),
            port,
            server_name,
            connector: TlsConnector::from(Arc::new(config)),
            target,
        })
    }
}

impl Dialer for TlsDialer {
    fn dial(&self) -> BoxFuture<'static, Result<Dialed, TransportError>> {
        let (host, port) = (self.host.clone(), self.port);
        let (name, connector, target) = (
            self.server_name.clone(),
            self.connector.clone(),
            self.target.clone(),
        );
        async move {
            // The pool bounds the whole dial too; this bounds a name lookup or SYN that
            // hangs, so that its error says what hung.
            let tcp =
                tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host.as_str(), port)))
                    .await
                    .map_err(|_| {
                        TransportError::transient(format!("{target}: TCP connect timed out"))
                    })?
                    .map_err(|e| TransportError::transient(format!("{target}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| io_failure(&target, &e))?;
            Ok(Dialed {
                io: Box::new(tls),
                explain: None,
                gone: None,
            })
        }
        .boxed()
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn request_failed(&self, e: &hyper::Error) -> TransportError {
        match find_rustls(e) {
            Some(tls) => tls_failure(&self.target, tls),
            None => TransportError::transient(format!(
                "{}: {}",
                self.target,
                crate::error::error_chain(e)
            )),
        }
    }
}

/// Only the target's CA is trusted: a certificate that chains to a public CA is refused.
fn client_config(files: &TlsFiles) -> Result<ClientConfig, EndpointError> {
    let mut roots = RootCertStore::empty();
    for ca in certificates(&files.ca, "CA")? {
        roots.add(ca).map_err(|source| EndpointError::BadCa {
            path: files.ca.clone(),
            source,
        })?;
    }
    let chain = certificates(&files.cert, "client certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key, "client key")?).map_err(|_| {
        EndpointError::NoPrivateKey {
            path: files.key.clone(),
        }
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(EndpointError::Protocols)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|source| EndpointError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, EndpointError> {
    std::fs::read(path).map_err(|source| EndpointError::Unreadable {
        what,
        path: path.to_owned(),
        source,
    })
}

fn certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, EndpointError> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| EndpointError::NotPem {
            what,
            path: path.to_owned(),
        })?;
    if certs.is_empty() {
        return Err(EndpointError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The rustls error somewhere in `e`'s causes (inside an `io::Error` where tokio-rustls
/// and hyper put it).
fn find_rustls<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = c
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        cause = c.source();
    }
    None
}

fn io_failure(target: &str, e: &io::Error) -> TransportError {
    match find_rustls(e) {
        Some(tls) => tls_failure(target, tls),
        // A reset or EOF in the middle of the handshake: the engine is restarting, or
        // something between is; worth another try.
        None => TransportError::transient(format!("{target}: TLS handshake: {e}")),
    }
}

/// A certificate either side refused, or TLS the two cannot agree on, does not change by
/// waiting: permanent. (With TLS 1.3 the engine's verdict on Pier's certificate arrives as
/// an alert after the handshake, on the first request; it is classified the same way.)
fn tls_failure(target: &str, e: &rustls::Error) -> TransportError {
    match e {
        rustls::Error::InvalidCertificate(why) => TransportError::permanent(format!(
            "{target}: the engine's certificate is refused ({why}): it must be signed by the \
             target's CA and name the address Pier dials"
        )),
        rustls::Error::AlertReceived(alert) if refuses_certificate(*alert) => {
            TransportError::permanent(format!(
                "{target}: the engine refused Pier's client certificate ({alert:?}): it must be \
                 signed by the CA the engine's --tlscacert names"
            ))
        }
        rustls::Error::AlertReceived(AlertDescription::CloseNotify) => {
            TransportError::transient(format!("{target}: the engine closed the connection"))
        }
        other => TransportError::permanent(format!("{target}: TLS: {other}")),
    }
}

fn refuses_certificate(alert: AlertDescription) -> bool {
    use AlertDescription as A;
    matches!(
        alert,
        A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnknownCA
            | A::AccessDenied
            | A::HandshakeFailure
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::transport::Retry;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    fn write_pair(dir: &Path) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertificateParams::new(vec![])
            .unwrap()
            .self_signed(&ca_key)
            .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["pier".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn a_missing_file_is_named_and_permanent() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path());
        std::fs::remove_file(dir.path().join("key.pem")).unwrap();
        let e = TlsDialer::new("10.0.0.2", 2376, &files(dir.path()), "tcp://x".into())
            .err()
            .expect("no key file");
        assert_eq!(e.retry, Retry::Permanent);
        assert!(
            e.message
                .contains(&dir.path().join("key.pem").display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path());
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        std::fs::write(dir.path().join("key.pem"), &other).unwrap();
        let e = TlsDialer::new("10.0.0.2", 2376, &files(dir.path()), "tcp://x".into())
            .err()
            .expect("mismatched key");
        assert!(e.message.contains("do not go together"), "{e}");
        assert!(!e.message.contains("PRIVATE KEY"), "{e}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path());
        std::fs::write(dir.path().join("ca.pem"), "not a certificate\n").unwrap();
        let e = TlsDialer::new("10.0.0.2", 2376, &files(dir.path()), "tcp://x".into())
            .err()
            .expect("empty CA");
        assert!(e.message.contains("holds no PEM certificate"), "{e}");
        assert!(matches!(
            client_config(&files(dir.path())),
            Err(EndpointError::NoCertificate { what: "CA", .. })
        ));
    }
}
