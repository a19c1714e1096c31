//! `ssh://` as `docker -H ssh://` does it: each connection is one `ssh … -- host docker
//! system dial-stdio`, whose stdin and stdout carry HTTP to the remote engine. Unlike
//! bollard's own SSH transport (the openssh crate, which accepts and records an unknown
//! host key), Pier pins every option that decides whom it talks to: the target's
//! known-hosts file is the only source of host keys, an unknown or changed key is refused
//! and nothing is ever written to that file, and no `ssh_config` can change any of it.

use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use super::pool::{Dialed, Dialer};
use super::{EndpointError, TransportError, one_line};
use crate::domain::SshEndpoint;

/// ssh's own limit on TCP connect and the SSH handshake (the pool bounds the whole dial).
const SSH_CONNECT_TIMEOUT_SECS: u32 = 10;
/// A silent peer on an open connection (a pull that streams) is noticed within
/// `interval × count` seconds.
const SERVER_ALIVE_INTERVAL_SECS: u32 = 15;
const SERVER_ALIVE_COUNT: u32 = 3;
/// What of ssh's stderr is kept to explain a failure; the rest is read and dropped.
const STDERR_CAP: usize = 4096;
/// How long a failed connection's ssh may take to finish saying why.
const EXPLAIN_WAIT: Duration = Duration::from_secs(3);

pub(crate) struct SshDialer {
    args: Vec<String>,
    target: String,
}

impl SshDialer {
    /// Checks the endpoint and its files now, so that a typo stops Pier with the file
    /// named; `target` is the endpoint as shown.
    pub(crate) fn new(ssh: &SshEndpoint, target: String) -> Result<Self, TransportError> {
        let bad = |e: EndpointError| e.at(&target);
        check_word("host", &ssh.host).map_err(bad)?;
        if let Some(user) = &ssh.user {
            check_word("user", user).map_err(bad)?;
        }
        readable(&ssh.known_hosts, "known_hosts").map_err(bad)?;
        if let Some(identity) = &ssh.identity {
            readable(identity, "identity").map_err(bad)?;
        }
        Ok(Self {
            args: arguments(ssh),
            target,
        })
    }
}

/// The whole command line after `ssh`. `-F none`: no ssh_config file is read, so neither
/// the user's nor the system's can add host keys, a control master or a proxy. `--`
/// ends ssh's options: the host is never read as one.
fn arguments(ssh: &SshEndpoint) -> Vec<String> {
    let mut args: Vec<String> = ["-F", "none", "-T", "-x", "-a"].map(String::from).to_vec();
    let known_hosts = ssh.known_hosts.display();
    for option in [
        "BatchMode=yes".to_owned(),
        "StrictHostKeyChecking=yes".to_owned(),
        format!("UserKnownHostsFile={known_hosts}"),
        "GlobalKnownHostsFile=/dev/null".to_owned(),
        "UpdateHostKeys=no".to_owned(),
        "VerifyHostKeyDNS=no".to_owned(),
        "ControlMaster=no".to_owned(),
        "ControlPath=none".to_owned(),
        "ClearAllForwardings=yes".to_owned(),
        "PermitLocalCommand=no".to_owned(),
        format!("ConnectTimeout={SSH_CONNECT_TIMEOUT_SECS}"),
        format!("ServerAliveInterval={SERVER_ALIVE_INTERVAL_SECS}"),
        format!("ServerAliveCountMax={SERVER_ALIVE_COUNT}"),
        "LogLevel=ERROR".to_owned(),
    ] {
        args.push("-o".into());
        args.push(option);
    }
    if let Some(identity) = &ssh.identity {
        args.extend(["-i".into(), identity.display().to_string()]);
        args.extend(["-o".into(), "IdentitiesOnly=yes".into()]);
    }
    if let Some(user) = &ssh.user {
        args.extend(["-l".into(), user.clone()]);
    }
    args.extend([
        "-p".into(),
        ssh.port.to_string(),
        "--".into(),
        ssh.host.clone(),
    ]);
    args.extend(["docker", "system", "dial-stdio"].map(String::from));
    args
}

/// ssh reads a word that starts with `-` as an option (`-oProxyCommand=…` runs a command)
/// and one with spaces as several: neither may reach its command line.
fn check_word(what: &'static str, value: &str) -> Result<(), EndpointError> {
    if value.is_empty()
        || value.starts_with('-')
        || value.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(EndpointError::BadWord {
            what,
            value: value.to_owned(),
        });
    }
    Ok(())
}

fn readable(path: &Path, what: &'static str) -> Result<(), EndpointError> {
    let meta = std::fs::File::open(path)
        .and_then(|f| f.metadata())
        .map_err(|source| EndpointError::Unreadable {
            what,
            path: path.to_owned(),
            source,
        })?;
    if !meta.is_file() {
        return Err(EndpointError::NotAFile {
            what,
            path: path.to_owned(),
        });
    }
    Ok(())
}

impl Dialer for SshDialer {
    fn dial(&self) -> BoxFuture<'static, Result<Dialed, TransportError>> {
        let spawned = Command::new("ssh")
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Ended by `keep` when its stream is dropped (connection closed, idle timeout,
            // the client dropped, a deadline hit); this covers a runtime shutting down.
            .kill_on_drop(true)
            .spawn();
        let target = self.target.clone();
        async move {
            let mut child = spawned.map_err(|e| {
                TransportError::permanent(format!("{target}: cannot run `ssh`: {e}"))
            })?;
            let (stdin, stdout, stderr) =
                match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                    (Some(i), Some(o), Some(e)) => (i, o, e),
                    _ => {
                        return Err(TransportError::permanent(format!(
                            "{target}: no pipes to ssh"
                        )));
                    }
                };
            let said = Said::collect(stderr);
            let explain = said.explain(target).boxed();
            let (dropped, gone) = keep(child);
            Ok(Dialed {
                io: Box::new(SshStream {
                    stdin,
                    stdout,
                    _dropped: dropped,
                }),
                explain: Some(explain),
                gone: Some(gone),
            })
        }
        .boxed()
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn request_failed(&self, e: &hyper::Error) -> TransportError {
        TransportError::transient(format!(
            "{}: the ssh connection failed: {}",
            self.target,
            crate::error::error_chain(e)
        ))
    }
}

/// Owns `child` on a task of its own until it exits, or until the returned sender is
/// dropped (the stream is gone), then kills it; the returned future resolves once the
/// process has been reaped. No ssh outlives its connection, and none is left a zombie.
fn keep(mut child: Child) -> (oneshot::Sender<()>, BoxFuture<'static, ()>) {
    let (dropped_tx, dropped) = oneshot::channel::<()>();
    let (reaped_tx, reaped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = child.wait() => {}
            _ = dropped => {
                // kill() also waits; kill_on_drop covers a runtime that shuts down first.
                let _ = child.kill().await;
            }
        }
        let _ = reaped_tx.send(());
    });
    (dropped_tx, reaped.map(|_| ()).boxed())
}

/// One ssh process's stdio as a byte stream.
struct SshStream {
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Dropped with the stream: tells [`keep`] to end the process.
    _dropped: oneshot::Sender<()>,
}

impl AsyncRead for SshStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

impl AsyncWrite for SshStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stdin).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdin).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdin).poll_shutdown(cx)
    }
}

/// The first [`STDERR_CAP`] bytes ssh wrote to stderr, complete once ssh closed it.
#[derive(Clone)]
struct Said {
    text: Arc<Mutex<Vec<u8>>>,
    closed: watch::Receiver<bool>,
}

impl Said {
    fn collect(mut stderr: tokio::process::ChildStderr) -> Self {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (done, closed) = watch::channel(false);
        let kept = text.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 1024];
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                let mut t = kept.lock().unwrap_or_else(|e| e.into_inner());
                let room = STDERR_CAP.saturating_sub(t.len());
                t.extend_from_slice(&chunk[..n.min(room)]);
            }
            let _ = done.send(true);
        });
        Self { text, closed }
    }

    /// Why ssh failed, once it finished saying so (or [`EXPLAIN_WAIT`] passed).
    async fn explain(mut self, target: String) -> Option<TransportError> {
        let _ = tokio::time::timeout(EXPLAIN_WAIT, self.closed.wait_for(|c| *c)).await;
        let text = String::from_utf8_lossy(&self.text.lock().unwrap_or_else(|e| e.into_inner()))
            .into_owned();
        classify(&target, &text)
    }
}

/// What ssh (or the remote `docker system dial-stdio`) printed, as a failure class.
/// Unknown text is transient: the retry budget bounds it, and the text is in the message.
fn classify(target: &str, stderr: &str) -> Option<TransportError> {
    let said = one_line(
        &stderr
            .lines()
            .map(|l| l.trim_matches(|c: char| c == '@' || c.is_whitespace()))
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        400,
    );
    if said.is_empty() {
        return None;
    }
    let has = |needles: &[&str]| needles.iter().any(|n| said.contains(n));
    let err = if has(&[
        "Host key verification failed",
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "host key is known",
        "Host key for",
    ]) {
        TransportError::permanent(format!(
            "{target}: host key refused: the target's known_hosts file has no matching key \
             for it, and Pier never adds one (ssh: {said})"
        ))
    } else if has(&[
        "Permission denied",
        "Too many authentication failures",
        "Load key",
    ]) {
        TransportError::permanent(format!("{target}: login refused (ssh: {said})"))
    } else if has(&[
        "command not found",
        "docker: not found",
        "Bad configuration option",
    ]) {
        TransportError::permanent(format!("{target}: {said}"))
    } else {
        // Refused, timed out, no route, the remote engine down ("failed to open the raw
        // stream connection"), a reset: all may pass.
        TransportError::transient(format!("{target}: {said}"))
    };
    Some(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::transport::Retry;

    fn endpoint() -> SshEndpoint {
        SshEndpoint {
            user: Some("deploy".into()),
            host: "edge-1".into(),
            port: 2222,
            known_hosts: "/etc/pier/known_hosts".into(),
            identity: Some("/etc/pier/id_ed25519".into()),
        }
    }

    #[test]
    fn every_option_that_decides_the_peer_is_pinned_and_the_host_comes_after_dashes() {
        let args = arguments(&endpoint()).join(" ");
        for pinned in [
            "-F none",
            "-o StrictHostKeyChecking=yes",
            "-o UserKnownHostsFile=/etc/pier/known_hosts",
            "-o GlobalKnownHostsFile=/dev/null",
            "-o UpdateHostKeys=no",
            "-o BatchMode=yes",
            "-o ControlMaster=no",
            "-i /etc/pier/id_ed25519 -o IdentitiesOnly=yes",
            "-l deploy -p 2222 -- edge-1 docker system dial-stdio",
        ] {
            assert!(args.contains(pinned), "{pinned} missing from {args}");
        }
        assert!(
            args.ends_with("-- edge-1 docker system dial-stdio"),
            "{args}"
        );
    }

    #[test]
    fn a_host_that_looks_like_an_option_is_refused() {
        for host in ["-oProxyCommand=x", "a b", ""] {
            assert!(
                matches!(check_word("host", host), Err(EndpointError::BadWord { value, .. }) if value == host),
                "{host}"
            );
        }
        assert!(check_word("host", "edge-1.example.com").is_ok());
    }

    #[test]
    fn ssh_failures_are_classified_by_what_ssh_said() {
        let class = |s: &str| classify("ssh://x", s).map(|e| e.retry);
        assert_eq!(
            class(
                "No ED25519 host key is known for [10.0.0.2]:2222 and you have requested strict checking.\nHost key verification failed.\n"
            ),
            Some(Retry::Permanent)
        );
        assert_eq!(
            class("@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"),
            Some(Retry::Permanent)
        );
        assert_eq!(
            class("root@10.0.0.2: Permission denied (publickey)."),
            Some(Retry::Permanent)
        );
        assert_eq!(
            class("ssh: connect to host 10.0.0.2 port 2222: Connection refused"),
            Some(Retry::Transient)
        );
        assert_eq!(
            class(
                "failed to open the raw stream connection: dial unix /run/docker.sock: connect: no such file or directory"
            ),
            Some(Retry::Transient)
        );
        assert_eq!(class(""), None);
    }
}
