//! The operator commands' HTTP client of Pier's JSON API: one base URL, the caller's own
//! bearer token, a deadline on connecting and on every whole answer, a cap on its size,
//! and errors that say what went wrong in the operator's words. The token is sent only to
//! the URL it was given for, follows no redirect, and appears in no message.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::config::Secret;

/// Opening the connection, TLS included.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);
/// A whole answer, body included; a long-poll gets its wait on top.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);
/// How long a followed answer may send nothing at all: the server sends a keep-alive after
/// 15 s without a line, so this much silence is a dead link or a dead server.
const QUIET_DEADLINE: Duration = Duration::from_secs(45);
/// The largest answer read (`GET /api/apps` of a few hundred apps is well below it).
const MAX_ANSWER: usize = 16 << 20;
/// Text of the server's own quoted in an error, at most.
const MAX_QUOTED: usize = 300;

/// Why an operator command could not get its answer from Pier.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no Pier server to talk to: give its URL with --url or PIER_URL (and your token in \
         PIER_TOKEN or --token-file), or run `pier login URL`; no credentials at {looked}"
    )]
    NoServer { looked: String },
    #[error("`{given}` is not an http:// or https:// URL of a Pier server")]
    BadUrl { given: String },
    #[error(
        "the URL names a user or password: give the token in PIER_TOKEN or --token-file instead"
    )]
    CredentialsInUrl,
    #[error(
        "{url} needs your token: set PIER_TOKEN, give --token-file (PIER_TOKEN_FILE), or run \
         `pier login {url}`"
    )]
    NoToken { url: String },
    #[error("give your token either in PIER_TOKEN or in a token file, not both")]
    TwoTokens,
    #[error("the token file {}: {cause}", path.display())]
    TokenFile {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("the token file {} is empty", path.display())]
    EmptyToken { path: PathBuf },
    #[error("the CA file {}: {reason}", path.display())]
    CaFile { path: PathBuf, reason: String },
    #[error("the credentials file {}: {reason}", path.display())]
    Credentials { path: PathBuf, reason: String },
    #[error("no Pier answers at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "the TLS certificate of {url} is not trusted ({reason}): give the CA that signs it \
         with --ca-file or PIER_CA_FILE"
    )]
    Untrusted { url: String, reason: String },
    #[error("{url} did not answer within {after}")]
    Timeout { url: String, after: String },
    #[error("the token was refused by {url}")]
    Unauthorized { url: String },
    #[error("{url} refused: {reason}")]
    Forbidden { url: String, reason: String },
    #[error("{url} answered {status}: {reason}")]
    Refused {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("{url}: the answer is larger than {MAX_ANSWER} bytes")]
    TooLarge { url: String },
    #[error("{url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("{url} answered something that is not Pier's JSON: {reason}")]
    BadAnswer { url: String, reason: String },
}

/// A Pier server and the caller's token for it.
pub(super) struct Client {
    http: reqwest::Client,
    /// `scheme://host[:port][/prefix]`, no trailing slash.
    base: String,
    token: Option<Secret>,
}

/// `given` as the base URL of a Pier server: http or https, no user or password, no
/// query; a path is kept (a Pier behind a reverse proxy under `/pier/`).
pub(super) fn base_url(given: &str) -> Result<String, ClientError> {
    let bad = || ClientError::BadUrl { given: clip(given) };
    let url = reqwest::Url::parse(given.trim()).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ClientError::CredentialsInUrl);
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

impl Client {
    pub(super) fn new(
        base: String,
        token: Option<Secret>,
        ca_file: Option<&Path>,
    ) -> Result<Self, ClientError> {
        crate::runtime::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("pier-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_DEADLINE)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = ca_file {
            builder = builder.tls_certs_only(ca_certificates(path)?);
        }
        let http = builder.build().map_err(|e| ClientError::Transport {
            url: base.clone(),
            reason: deepest_cause(&e),
        })?;
        Ok(Self { http, base, token })
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    pub(super) async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(self.http.get(self.url(path)), Duration::ZERO)
            .await
    }

    /// A long-poll: its deadline is the server's `wait` plus the usual one.
    pub(super) async fn get_waiting(
        &self,
        path: &str,
        wait: Duration,
    ) -> Result<Value, ClientError> {
        self.send(self.http.get(self.url(path)), wait).await
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> Result<Value, ClientError> {
        let req = self.http.post(self.url(path)).json(&body);
        self.send(req, Duration::ZERO).await
    }

    /// A newline-delimited JSON answer, handed to `each` line by line as it arrives, until
    /// it ends or `each` says to stop (false). Blank lines are the server's keep-alives.
    /// Read once, the whole answer has the usual deadline; followed (`follows`), it goes
    /// on as long as the server sends, but never quiet for longer than
    /// [`QUIET_DEADLINE`]. A line longer than [`MAX_ANSWER`] ends it.
    pub(super) async fn get_lines(
        &self,
        path: &str,
        follows: bool,
        mut each: impl FnMut(Value) -> bool,
    ) -> Result<(), ClientError> {
        let mut req = self
            .http
            .get(self.url(path))
            .header(reqwest::header::ACCEPT, "application/x-ndjson");
        if !follows {
            req = req.timeout(ANSWER_DEADLINE);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t.expose());
        }
        let timeout = |after: Duration| ClientError::Timeout {
            url: self.base.clone(),
            after: humantime::format_duration(after).to_string(),
        };
        let resp = tokio::time::timeout(ANSWER_DEADLINE, req.send())
            .await
            .map_err(|_| timeout(ANSWER_DEADLINE))?
            .map_err(|e| self.transport(&e, ANSWER_DEADLINE))?;
        let status = resp.status();
        if !status.is_success() {
            let body = self.read(resp, ANSWER_DEADLINE).await?;
            return Err(self.refused(status, &body));
        }
        let mut resp = resp;
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = tokio::time::timeout(QUIET_DEADLINE, resp.chunk())
                .await
                .map_err(|_| timeout(QUIET_DEADLINE))?
                .map_err(|e| self.transport(&e, ANSWER_DEADLINE))?;
            let Some(chunk) = chunk else {
                return Ok(());
            };
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let v = serde_json::from_slice(&line).map_err(|e| ClientError::BadAnswer {
                    url: self.base.clone(),
                    reason: e.to_string(),
                })?;
                if !each(v) {
                    return Ok(());
                }
            }
            if pending.len() > MAX_ANSWER {
                return Err(ClientError::TooLarge {
                    url: self.base.clone(),
                });
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        wait: Duration,
    ) -> Result<Value, ClientError> {
        let deadline = ANSWER_DEADLINE + wait;
        let mut req = req
            .timeout(deadline)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t.expose());
        }
        let resp = req.send().await.map_err(|e| self.transport(&e, deadline))?;
        let status = resp.status();
        let body = self.read(resp, deadline).await?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| ClientError::BadAnswer {
                url: self.base.clone(),
                reason: e.to_string(),
            });
        }
        Err(self.refused(status, &body))
    }

    /// The body, at most [`MAX_ANSWER`] bytes: refused as soon as it is known to be larger.
    async fn read(
        &self,
        mut resp: reqwest::Response,
        deadline: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let too_large = || ClientError::TooLarge {
            url: self.base.clone(),
        };
        if resp.content_length().is_some_and(|n| n > MAX_ANSWER as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| self.transport(&e, deadline))?
        {
            if chunk.len() > MAX_ANSWER - body.len() {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn refused(&self, status: reqwest::StatusCode, body: &[u8]) -> ClientError {
        let url = self.base.clone();
        let reason = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("error")?.as_str().map(clip))
            .unwrap_or_else(|| match clip(&String::from_utf8_lossy(body)) {
                t if t.is_empty() => status.to_string(),
                t => t,
            });
        match status.as_u16() {
            401 => ClientError::Unauthorized { url },
            403 => ClientError::Forbidden { url, reason },
            code => ClientError::Refused {
                url,
                status: code,
                reason,
            },
        }
    }

    fn transport(&self, e: &reqwest::Error, deadline: Duration) -> ClientError {
        let url = self.base.clone();
        if e.is_timeout() {
            return ClientError::Timeout {
                url,
                after: humantime::format_duration(deadline).to_string(),
            };
        }
        if let Some(reason) = certificate_error(e) {
            return ClientError::Untrusted { url, reason };
        }
        let reason = deepest_cause(e);
        if e.is_connect() {
            ClientError::Unreachable { url, reason }
        } else {
            ClientError::Transport { url, reason }
        }
    }
}

fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let bad = |reason: String| ClientError::CaFile {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(deepest_cause(&e)))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(certs)
}

/// The server's certificate was refused by rustls, in its words. rustls' error sits inside
/// an `io::Error` (inside another one), whose `source()` skips it, so each `io::Error` is
/// looked into.
fn certificate_error(e: &reqwest::Error) -> Option<String> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let mut inner: &(dyn std::error::Error + 'static) = c;
        while let Some(wrapped) = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            inner = wrapped;
        }
        if let Some(t @ rustls::Error::InvalidCertificate(_)) = inner.downcast_ref() {
            return Some(t.to_string());
        }
        cause = c.source();
    }
    None
}

/// reqwest's own message names the URL again; its innermost cause is the short one
/// (`Connection refused (os error 111)`).
fn deepest_cause(e: &reqwest::Error) -> String {
    let mut last = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        last = c.to_string();
        cause = c.source();
    }
    clip(&last)
}

/// One short line of someone else's text: no control characters, at most [`MAX_QUOTED`].
pub(super) fn clip(text: &str) -> String {
    let mut out: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED)
        .collect();
    if text.chars().count() > MAX_QUOTED {
        out.push('…');
    }
    out.trim().to_owned()
}

/// `s` as one path segment: every byte but letters, digits, `-`, `_` and `~`
/// percent-encoded (`.` too, so that `..` is not a step up), so that an argument cannot
/// reach another route.
pub(super) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_http_or_https_without_credentials_or_query() {
        assert_eq!(
            base_url("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            base_url("https://ops.example/pier/").unwrap(),
            "https://ops.example/pier"
        );
        for bad in ["127.0.0.1:8080", "ftp://x/", "http:///", "http://x/?a=b"] {
            assert!(
                matches!(base_url(bad), Err(ClientError::BadUrl { .. })),
                "{bad}"
            );
        }
        let e = base_url("https://ops:s3cret@pier.example/").unwrap_err();
        assert!(matches!(e, ClientError::CredentialsInUrl));
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn a_path_segment_cannot_reach_another_route() {
        assert_eq!(segment("web-1"), "web-1");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("../deployments"), "%2E%2E%2Fdeployments");
        assert_eq!(segment("a b?c"), "a%20b%3Fc");
    }
}
