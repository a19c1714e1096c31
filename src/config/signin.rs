//! Sign-in to the status page: where Pier is reached from (`server.public_url`), the
//! optional admin password (an argon2 or bcrypt hash, never the password itself), how long a
//! session lasts, and whether the read-only pages need one.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::{ConfigError, Secret};

/// The `[server]` fields of sign-in, as written.
#[derive(Debug, Default)]
pub(super) struct RawSignIn {
    pub public_url: Option<String>,
    pub admin_password_hash: Option<String>,
    pub session_ttl: Option<Duration>,
    pub pages_need_sign_in: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct SignInConfig {
    /// The origin browsers reach Pier at (`https://pier.example.com`), without a path.
    /// Cross-site checks trust it; `https` makes the session cookie `Secure`.
    pub public_url: String,
    /// An argon2 (`$argon2id$…`) or bcrypt (`$2b$…`) hash: a password that signs in besides
    /// the admin token.
    pub password_hash: Option<Secret>,
    /// A session's life from sign-in; then it is refused and the browser signs in again.
    pub session_ttl: Duration,
    /// Whether `GET` pages (apps, deployments, deliveries) need a session too.
    pub pages_need_sign_in: bool,
}

impl SignInConfig {
    pub(crate) fn secure_cookie(&self) -> bool {
        self.public_url.starts_with("https://")
    }
}

/// Sessions last at least a minute and at most 30 days.
const MIN_TTL: Duration = Duration::from_secs(60);
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
const DEFAULT_TTL: Duration = Duration::from_secs(12 * 3600);

impl RawSignIn {
    pub(super) fn resolve(
        self,
        listen: SocketAddr,
        base: &Path,
    ) -> Result<SignInConfig, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        let public_url = match self.public_url {
            None => format!("http://{listen}"),
            Some(u) => {
                let u = u.trim_end_matches('/').to_owned();
                let rest = u
                    .strip_prefix("https://")
                    .or_else(|| u.strip_prefix("http://"))
                    .ok_or_else(|| {
                        invalid(format!(
                            "server.public_url `{u}` must start with https:// or http://"
                        ))
                    })?;
                if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
                    return Err(invalid(format!(
                        "server.public_url `{u}`: give the origin only (scheme, host, port), no path"
                    )));
                }
                u
            }
        };
        let password_hash = self
            .admin_password_hash
            .map(|h| Secret::resolve("server.admin_password_hash", &h, base))
            .transpose()?
            .filter(|h| !h.expose().is_empty());
        if let Some(h) = &password_hash
            && !is_password_hash(h.expose())
        {
            return Err(invalid(
                "server.admin_password_hash must be an argon2 ($argon2id$…) or bcrypt ($2b$…) \
                 hash, not a password"
                    .into(),
            ));
        }
        let session_ttl = self.session_ttl.unwrap_or(DEFAULT_TTL);
        if !(MIN_TTL..=MAX_TTL).contains(&session_ttl) {
            return Err(invalid(
                "server.session_ttl must be between 1m and 30d".into(),
            ));
        }
        let pages_need_sign_in = self
            .pages_need_sign_in
            .unwrap_or_else(|| !is_loopback_url(&public_url));
        Ok(SignInConfig {
            public_url,
            password_hash,
            session_ttl,
            pages_need_sign_in,
        })
    }
}

pub(super) fn is_password_hash(h: &str) -> bool {
    h.starts_with("$argon2") || ["$2a$", "$2b$", "$2y$"].iter().any(|p| h.starts_with(p))
}

/// Whether a URL's host is this machine only: pages then need no sign-in by default.
fn is_loopback_url(url: &str) -> bool {
    let host_port = url.split("://").nth(1).unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(raw: RawSignIn) -> Result<SignInConfig, ConfigError> {
        raw.resolve("127.0.0.1:8080".parse().unwrap(), Path::new("."))
    }

    #[test]
    fn pages_need_sign_in_by_default_only_off_loopback() {
        let local = resolve(RawSignIn::default()).unwrap();
        assert_eq!(local.public_url, "http://127.0.0.1:8080");
        assert!(!local.pages_need_sign_in);
        assert!(!local.secure_cookie());
        for (url, need) in [
            ("https://pier.example.com", true),
            ("http://[::1]:8080", false),
            ("http://localhost:8080/", false),
            ("http://10.0.0.2", true),
        ] {
            let c = resolve(RawSignIn {
                public_url: Some(url.into()),
                ..Default::default()
            })
            .unwrap();
            assert_eq!(c.pages_need_sign_in, need, "{url}");
        }
        let forced = resolve(RawSignIn {
            public_url: Some("https://pier.example.com".into()),
            pages_need_sign_in: Some(false),
            ..Default::default()
        })
        .unwrap();
        assert!(!forced.pages_need_sign_in);
        assert!(forced.secure_cookie());
    }

    #[test]
    fn a_password_instead_of_its_hash_or_a_url_with_a_path_is_refused() {
        let plain = resolve(RawSignIn {
            admin_password_hash: Some("hunter2".into()),
            ..Default::default()
        });
        assert!(plain.unwrap_err().to_string().contains("not a password"));
        let path = resolve(RawSignIn {
            public_url: Some("https://pier.example.com/status".into()),
            ..Default::default()
        });
        assert!(path.unwrap_err().to_string().contains("no path"));
    }
}
