//! What every long-running command of Pier's (`serve`, `worker`, `proxy`) sets up the same
//! way at start: its log lines, its one TLS crypto provider and the TLS settings its HTTPS
//! clients share, its metrics recorder, and how it hears that it should stop.

use std::sync::OnceLock;

use metrics_exporter_prometheus::PrometheusHandle;

/// How log lines are written: human-readable text, or one JSON object per line for a log
/// collector. Colour codes only when the output is a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("pier=info,warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// Exactly one TLS crypto provider: reqwest's `rustls` feature (the registry client, probes) brings aws-lc-rs.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// `builder` with the TLS settings every HTTPS client of Pier's server shares (registry
/// endpoints, tag lists, notifications, health probes).
///
/// They are what reqwest would make for the client itself: the process's provider, the
/// system's root certificates through rustls-platform-verifier, ALPN `http/1.1` (Pier's
/// reqwest has no HTTP/2). But reqwest reads and parses the system's roots into a store of
/// its own for every client it builds, about 70 KiB of heap each, and `serve` builds four
/// or more at start. Here they are read once, on first use, into one verifier that every
/// client's copy of the settings points at. Each copy keeps a session cache of its own, as
/// a client reqwest set up would. Where the roots cannot be read, `builder` is left alone,
/// so that it fails at `build` with reqwest's own error, as it always did.
pub(crate) fn with_shared_tls(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    static SHARED: OnceLock<Option<rustls::ClientConfig>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone()).ok()?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Some(tls)
    });
    match shared {
        Some(tls) => {
            let mut tls = tls.clone();
            tls.resumption = rustls::client::Resumption::default();
            builder.tls_backend_preconfigured(tls)
        }
        None => builder,
    }
}

/// The process's metrics recorder, installed once however many times Pier starts in it.
pub(crate) fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Durations are histograms with buckets (not summaries), so that they can be
            // summed across processes: a step takes milliseconds to minutes.
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[
                        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    ],
                )
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

/// Tells systemd (a `Type=notify` unit) that this process is ready: `pier serve` once it has
/// migrated and listens, `pier proxy` once its sockets are bound, so that a unit ordered
/// after it, or a hand-over proxy started beside the old one, starts only then. Nothing
/// happens outside systemd (no `NOTIFY_SOCKET`).
pub(crate) fn notify_ready() {
    if let Some(socket) = std::env::var_os("NOTIFY_SOCKET")
        && let Err(e) = notify(&socket, "READY=1")
    {
        tracing::warn!(error = %e, "cannot tell systemd that Pier is ready");
    }
}

/// One datagram to the notification socket: a path, or `@name` in the abstract namespace.
fn notify(socket: &std::ffi::OsStr, message: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(socket))?,
    };
    UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr)?;
    Ok(())
}

/// SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    use super::*;

    /// The server name and ALPN protocols a client made by `builder` offers in its TLS
    /// hello, and the error it ends with when the server shows a self-signed certificate.
    async fn hello_of(builder: reqwest::ClientBuilder) -> (Option<String>, Vec<Vec<u8>>, String) {
        install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = rustls::server::Acceptor::default();
            let start = tokio_rustls::LazyConfigAcceptor::new(acceptor, tcp)
                .await
                .unwrap();
            let hello = start.client_hello();
            let name = hello.server_name().map(str::to_owned);
            let alpn: Vec<Vec<u8>> = hello
                .alpn()
                .map(|protocols| protocols.map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            let key = rcgen::generate_simple_self_signed(vec!["pier.test".to_owned()]).unwrap();
            let der = PrivatePkcs8KeyDer::from(key.signing_key.serialize_der());
            let config = rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(vec![key.cert.der().clone()], PrivateKeyDer::Pkcs8(der))
                .unwrap();
            let _ = start.into_stream(Arc::new(config)).await;
            (name, alpn)
        });
        let client = builder.resolve("pier.test", addr).build().unwrap();
        let err = client
            .get(format!("https://pier.test:{}/", addr.port()))
            .send()
            .await
            .expect_err("a self-signed certificate is not trusted");
        let (name, alpn) = server.await.unwrap();
        (name, alpn, crate::error::error_chain(&err))
    }

    #[test]
    fn readiness_is_one_datagram_to_the_socket_systemd_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        notify(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let name = format!("@pier-test-{}", std::process::id());
        let abstract_listener = {
            use std::os::linux::net::SocketAddrExt as _;
            let addr =
                std::os::unix::net::SocketAddr::from_abstract_name(&name.as_bytes()[1..]).unwrap();
            std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap()
        };
        notify(std::ffi::OsStr::new(&name), "READY=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[tokio::test]
    async fn the_shared_tls_offers_what_reqwests_own_does_and_checks_the_certificate() {
        let (name, alpn, refused) = hello_of(with_shared_tls(reqwest::Client::builder())).await;
        let (own_name, own_alpn, _) = hello_of(reqwest::Client::builder()).await;
        assert_eq!((&name, &alpn), (&own_name, &own_alpn));
        assert_eq!(name.as_deref(), Some("pier.test"));
        assert_eq!(alpn, vec![b"http/1.1".to_vec()]);
        assert!(refused.contains("invalid peer certificate"), "{refused}");
    }
}
