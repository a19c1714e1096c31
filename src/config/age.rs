//! `age:PATH#KEY` secrets, read at each deployment: the file at `PATH` is age-encrypted
//! (binary or armored, as `age -e` or `age -e -a` writes it) and holds `KEY=VALUE` lines
//! (empty lines and lines starting with `#` are skipped; the value is everything after
//! the first `=`, as written, without quotes being removed). It is decrypted with the
//! installation's X25519 identity, `[server] age_identity`.
//!
//! Invariant: no error names a value or quotes a line of the decrypted text; they name the
//! file, the key, the line number and what went wrong.

use std::io::Read;
use std::path::PathBuf;
use std::str::FromStr;

use super::Secret;
use super::secrets::AgeRef;

/// The largest age file read: a secret store, not a data set.
pub const MAX_AGE_FILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum AgeError {
    #[error("age file {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("age file {} is larger than {MAX_AGE_FILE} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("age file {}: decryption failed: {reason}", path.display())]
    Decrypt { path: PathBuf, reason: String },
    #[error("age file {}: line {line} is not KEY=VALUE", path.display())]
    Format { path: PathBuf, line: usize },
    #[error("age file {}: no key `{key}`", path.display())]
    MissingKey { path: PathBuf, key: String },
    #[error("no [server] age_identity to decrypt age file {}", path.display())]
    NoIdentity { path: PathBuf },
}

/// An X25519 identity from its text, as `age-keygen` writes it (comment lines allowed).
/// The error never quotes the text.
pub(crate) fn identity(text: &str) -> Result<age::x25519::Identity, &'static str> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or("no AGE-SECRET-KEY-1… line")?;
    age::x25519::Identity::from_str(line).map_err(|_| "not an age X25519 identity")
}

impl AgeRef {
    /// The value of this reference's key, read and decrypted now.
    pub(crate) fn read(&self, identity: Option<&Secret>) -> Result<Secret, AgeError> {
        let path = &self.path;
        let identity = identity.ok_or_else(|| AgeError::NoIdentity { path: path.clone() })?;
        let identity = super::age::identity(identity.expose()).map_err(|e| AgeError::Decrypt {
            path: path.clone(),
            reason: format!("[server] age_identity: {e}"),
        })?;
        let cipher = read_capped(path)?;
        let plain = age::decrypt(&identity, &cipher).map_err(|e| AgeError::Decrypt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let text = String::from_utf8(plain).map_err(|_| AgeError::Format {
            path: path.clone(),
            line: 0,
        })?;
        lookup(&text, &self.key).map_err(|line| match line {
            Some(line) => AgeError::Format {
                path: path.clone(),
                line,
            },
            None => AgeError::MissingKey {
                path: path.clone(),
                key: self.key.clone(),
            },
        })
    }
}

fn read_capped(path: &PathBuf) -> Result<Vec<u8>, AgeError> {
    let file = std::fs::File::open(path).map_err(|cause| AgeError::Read {
        path: path.clone(),
        cause,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_AGE_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|cause| AgeError::Read {
            path: path.clone(),
            cause,
        })?;
    if bytes.len() as u64 > MAX_AGE_FILE {
        return Err(AgeError::TooLarge { path: path.clone() });
    }
    Ok(bytes)
}

/// `key`'s value in `KEY=VALUE` lines. `Err(Some(line))`: a malformed line (1-based);
/// `Err(None)`: no such key. Every line is checked, so a typo elsewhere is not hidden.
fn lookup(text: &str, key: &str) -> Result<Secret, Option<usize>> {
    let mut found = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(Some(i + 1));
        };
        if k.trim() == key {
            found = Some(Secret::reference(v.trim_end_matches('\r')));
        }
    }
    found.ok_or(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encrypted(dir: &std::path::Path, plain: &str) -> (PathBuf, Secret) {
        let id = age::x25519::Identity::generate();
        let cipher = age::encrypt(&id.to_public(), plain.as_bytes()).unwrap();
        let n = std::fs::read_dir(dir).unwrap().count();
        let path = dir.join(format!("s-{n}.age"));
        std::fs::write(&path, cipher).unwrap();
        let text = format!("# created by a test\n{}\n", id.to_string().expose_secret());
        (path, Secret::new(text))
    }

    use age::secrecy::ExposeSecret;

    #[test]
    fn a_key_is_read_from_an_age_file_of_key_value_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (path, id) = encrypted(dir, "# comment\nA=1\nDB_PASSWORD=p=ss word \n\n");
        let r = AgeRef {
            path: path.clone(),
            key: "DB_PASSWORD".into(),
        };
        assert_eq!(r.read(Some(&id)).unwrap().expose(), "p=ss word ");
        let missing = AgeRef {
            path: path.clone(),
            key: "NOPE".into(),
        };
        let e = missing.read(Some(&id)).unwrap_err().to_string();
        assert!(e.contains("no key `NOPE`"), "{e}");
        drop(path);
    }

    #[test]
    fn an_undecryptable_or_malformed_file_names_the_file_and_never_a_value() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (path, _) = encrypted(dir, "K=hunter2\n");
        let (_, other) = encrypted(dir, "");
        let r = AgeRef {
            path: path.clone(),
            key: "K".into(),
        };
        let e = r.read(Some(&other)).unwrap_err().to_string();
        assert!(e.contains("decryption failed"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        let e = r.read(None).unwrap_err().to_string();
        assert!(e.contains("no [server] age_identity"), "{e}");
        let (bad, id) = encrypted(dir, "K=hunter2\njust hunter2\n");
        let r = AgeRef {
            path: bad.clone(),
            key: "K".into(),
        };
        let e = r.read(Some(&id)).unwrap_err().to_string();
        assert!(e.contains("line 2 is not KEY=VALUE"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
}
