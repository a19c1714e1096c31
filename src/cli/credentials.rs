//! Where the operator's commands find Pier and the caller's own token: `--url`/`PIER_URL`,
//! `PIER_TOKEN` or a token file (`--token-file`/`PIER_TOKEN_FILE`), else what `pier login`
//! kept in `$XDG_CONFIG_HOME/pier/credentials` (or `~/.config/pier/credentials`), a file
//! only its owner may read. A kept token is sent only to the URL it was kept for.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Remote;
use super::client::{Client, ClientError, base_url};
use crate::config::Secret;

/// What `pier login` keeps.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    url: String,
    token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca_file: Option<PathBuf>,
}

/// Whether a command needs a token (every action) or works without one (`status`: the
/// read-only API is open unless the server says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Token,
    Nothing,
}

/// `$XDG_CONFIG_HOME/pier/credentials`, else `$HOME/.config/pier/credentials`.
fn kept_path() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(dir.join("pier").join("credentials"))
}

fn looked() -> String {
    kept_path().map_or_else(
        || "(neither XDG_CONFIG_HOME nor HOME is set)".to_owned(),
        |p| p.display().to_string(),
    )
}

/// The kept credentials, if `pier login` kept any; refused when others may read them.
fn read_kept() -> Result<Option<Kept>, ClientError> {
    let Some(path) = kept_path() else {
        return Ok(None);
    };
    let bad = |reason: String| ClientError::Credentials {
        path: path.clone(),
        reason,
    };
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "others may read it (mode {mode:o}): `chmod 600 {}`, or `pier login` again",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    // toml's message quotes the line, which holds the token: say where, not what.
    let kept: Kept = toml::from_str(&text)
        .map_err(|_| bad("not what `pier login` writes; run `pier login` again".into()))?;
    Ok(Some(kept))
}

fn token_from_file(path: &Path) -> Result<Secret, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ClientError::TokenFile {
        path: path.to_owned(),
        cause,
    })?;
    match text.trim() {
        "" => Err(ClientError::EmptyToken {
            path: path.to_owned(),
        }),
        t => Ok(Secret::new(t)),
    }
}

/// The token given for this command: `PIER_TOKEN` or a token file, never both.
fn given_token(remote: &Remote) -> Result<Option<Secret>, ClientError> {
    let env = std::env::var("PIER_TOKEN").ok().filter(|t| !t.is_empty());
    match (env, &remote.token_file) {
        (Some(_), Some(_)) => Err(ClientError::TwoTokens),
        (Some(t), None) => Ok(Some(Secret::new(t.trim()))),
        (None, Some(f)) => token_from_file(f).map(Some),
        (None, None) => Ok(None),
    }
}

/// The client for this command's server, with the caller's token.
pub(super) fn connect(remote: &Remote, need: Need) -> Result<Client, ClientError> {
    let kept = read_kept()?;
    let url = match (&remote.url, &kept) {
        (Some(u), _) => base_url(u)?,
        (None, Some(k)) => base_url(&k.url)?,
        (None, None) => return Err(ClientError::NoServer { looked: looked() }),
    };
    // What was kept for another server is never sent to this one.
    let kept = kept.filter(|k| base_url(&k.url).is_ok_and(|u| u == url));
    let token = match given_token(remote)? {
        Some(t) => Some(t),
        None => kept.as_ref().map(|k| Secret::new(k.token.as_str())),
    };
    if need == Need::Token && token.is_none() {
        return Err(ClientError::NoToken { url });
    }
    let ca = remote
        .ca_file
        .clone()
        .or_else(|| kept.and_then(|k| k.ca_file));
    Client::new(url, token, ca.as_deref())
}

/// Whose token a client carries, as the server says: `admin ops`, or the shared token.
pub(super) async fn whoami(client: &Client) -> anyhow::Result<Option<String>> {
    let who = client.get("/api/whoami").await?;
    Ok(who["admin"].as_str().map(str::to_owned))
}

/// `pier login [URL]`: the token is checked against the server before it is kept.
pub(super) async fn login(remote: Remote, server: Option<String>) -> anyhow::Result<()> {
    let Some(given) = server.or(remote.url.clone()) else {
        anyhow::bail!("give Pier's URL: `pier login https://pier.example.com`");
    };
    let url = base_url(&given)?;
    let token = match given_token(&remote)? {
        Some(t) => t,
        None => read_token(&url)?,
    };
    let ca_file = remote
        .ca_file
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    let client = Client::new(url.clone(), Some(token.clone()), ca_file.as_deref())?;
    let who = match whoami(&client).await? {
        Some(name) => format!("admin {name}"),
        None => "the shared server.admin_token".to_owned(),
    };
    let kept = Kept {
        url: url.clone(),
        token: token.expose().to_owned(),
        ca_file,
    };
    let path = kept_path().ok_or_else(|| ClientError::NoServer { looked: looked() })?;
    write_kept(&path, &kept)?;
    println!("logged in to {url} with {who}; kept in {}", path.display());
    Ok(())
}

/// The token from standard input: one line, not echoed when it is a terminal.
fn read_token(url: &str) -> anyhow::Result<Secret> {
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if terminal {
        eprint!("Your token for {url}: ");
        let _ = std::io::stderr().flush();
        let _ = std::process::Command::new("stty").arg("-echo").status();
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if terminal {
        let _ = std::process::Command::new("stty").arg("echo").status();
        eprintln!();
    }
    read?;
    match line.trim() {
        "" => anyhow::bail!("no token given: set PIER_TOKEN, give --token-file, or type it"),
        t => Ok(Secret::new(t)),
    }
}

/// Written whole to a new file of mode 0600 in a folder of mode 0700, then renamed over
/// the old: no moment exists where another user could read it, or a half of it is kept.
fn write_kept(path: &Path, kept: &Kept) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let text = toml::to_string(kept)?;
    let tmp = dir.join(format!(".credentials.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// `pier logout`: the kept credentials are deleted.
pub(super) fn logout() -> anyhow::Result<()> {
    let Some(path) = kept_path() else {
        anyhow::bail!("neither XDG_CONFIG_HOME nor HOME is set: no credentials to delete");
    };
    match std::fs::remove_file(&path) {
        Ok(()) => println!("deleted {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("not logged in: no {}", path.display())
        }
        Err(e) => return Err(anyhow::anyhow!("delete {}: {e}", path.display())),
    }
    Ok(())
}
