//! Certificate authorities made in the test, as an operator makes them for
//! `dockerd --tlsverify` (a CA, a server certificate naming the engine's addresses, client
//! certificates), with rcgen on the build's one crypto provider (aws-lc-rs).

use std::net::IpAddr;
use std::path::Path;

use pier::domain::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA that signs servers' and clients' certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A certificate and its private key, PEM.
pub struct IssuedPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("generate a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign the CA");
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for these addresses (IP SANs), as `dockerd --tlscert` takes.
    pub fn server(&self, addresses: &[IpAddr]) -> IssuedPair {
        let names = addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        self.issue("engine", names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate, as Pier presents it.
    pub fn client(&self, name: &str) -> IssuedPair {
        self.issue(name, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, cn: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose) -> IssuedPair {
        let key = KeyPair::generate().expect("generate a key");
        let mut params = CertificateParams::new(sans).expect("certificate params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        IssuedPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes `ca.pem`, `cert.pem` and `key.pem` into `dir` (created if need
    /// be): a client certificate of this CA, trusting `server_ca` for the engine's.
    pub fn client_files(&self, dir: &Path, server_ca: &TestCa) -> TlsFiles {
        std::fs::create_dir_all(dir).expect("create the client certificate dir");
        let pair = self.client("pier");
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.ca, server_ca.pem()).expect("write ca.pem");
        std::fs::write(&files.cert, pair.cert_pem).expect("write cert.pem");
        std::fs::write(&files.key, pair.key_pem).expect("write key.pem");
        files
    }
}
