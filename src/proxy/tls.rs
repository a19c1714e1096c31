//! TLS on the proxy's listen addresses: certificates from the PEM files the config names,
//! chosen per connection by SNI among the routes of that address (a route that takes any
//! host serves its certificate for any other name). HTTP/2 and HTTP/1.1 by ALPN.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, TlsFiles};

#[derive(Debug)]
struct BySni {
    hosts: HashMap<String, Arc<CertifiedKey>>,
    any: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        hello
            .server_name()
            .and_then(|n| self.hosts.get(&n.to_ascii_lowercase()).cloned())
            .or_else(|| self.any.clone())
    }
}

fn load(files: &TlsFiles) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("read certificates from {}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parse certificates in {}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(anyhow!("{} holds no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("read the private key in {}", files.key.display()))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| format!("load the private key in {}", files.key.display()))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

/// One acceptor per TLS listen address of the config.
pub(crate) fn acceptors(config: &Config) -> anyhow::Result<HashMap<SocketAddr, TlsAcceptor>> {
    let mut by_listen: HashMap<SocketAddr, BySni> = HashMap::new();
    for app in &config.apps {
        let Some(route) = &app.route else { continue };
        let Some(files) = &route.tls else { continue };
        let key = load(files).with_context(|| format!("app `{}`: route TLS", app.name))?;
        let sni = by_listen.entry(route.listen).or_insert_with(|| BySni {
            hosts: HashMap::new(),
            any: None,
        });
        if route.hosts.is_empty() {
            sni.any = Some(key);
        } else {
            for h in &route.hosts {
                sni.hosts.insert(h.clone(), key.clone());
            }
        }
    }
    let mut out = HashMap::new();
    for (listen, sni) in by_listen {
        let mut cfg = ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(sni));
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        out.insert(listen, TlsAcceptor::from(Arc::new(cfg)));
    }
    Ok(out)
}
