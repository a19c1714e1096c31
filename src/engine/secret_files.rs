//! A container's secret files: written by the engine itself into the host directory bound at
//! `/run/secrets`, through the archive API, before the container starts.
//!
//! Why a bound host directory and not a tmpfs mount of the container: the engine (20.10,
//! checked) mounts a container's `tmpfs` only inside the running container, and its
//! archive API writes below it into the container's writable layer, on disk (also while
//! the container runs). A bind mount is mounted for the archive API before the container
//! starts, so the engine writes the files (as root, with the owner and mode the archive
//! says) into the bound directory, which lies on the engine host's tmpfs
//! (`[server] secrets_dir`). `docker inspect` shows the directory's path, never a value.

use bollard::query_parameters::UploadToContainerOptionsBuilder;

use super::deadline::Call;
use super::{Engine, Result};

/// Where a container finds its secret files.
pub const SECRETS_TARGET: &str = "/run/secrets";

/// One secret file: its name under `/run/secrets` and its content. Never printed.
#[derive(Clone)]
pub struct SecretFile {
    pub name: String,
    pub value: Vec<u8>,
}

impl std::fmt::Debug for SecretFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretFile({})", self.name)
    }
}

/// The numeric owner of the files: the app's user; gid 0 unless it names one (the files
/// are 0400, readable by their owner only, so the group never matters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOwner {
    pub uid: u32,
    pub gid: u32,
}

/// An in-memory tar of `files`, each mode 0400 and owned by `owner`, mtime 0.
fn archive(files: &[SecretFile], owner: FileOwner) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for f in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(f.value.len() as u64);
        header.set_mode(0o400);
        header.set_uid(owner.uid.into());
        header.set_gid(owner.gid.into());
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, &f.name, f.value.as_slice())?;
    }
    tar.into_inner()
}

impl Engine {
    /// Writes `files` into the created container's `/run/secrets` (a bind of its directory
    /// under `secrets_dir`). Idempotent: writing again replaces the files, so a replay of
    /// `create` that adopts the container writes them again.
    pub(crate) async fn put_secret_files(
        &self,
        id: &str,
        files: &[SecretFile],
        owner: FileOwner,
    ) -> Result<()> {
        let tar = archive(files, owner).map_err(|e| super::EngineError::Refused {
            action: format!("secret files of {id}"),
            message: e.to_string(),
        })?;
        let tar = bytes::Bytes::from(tar);
        let action = format!("write secret files into container {id}");
        self.call(Call::Change, &action, async |d| {
            let options = UploadToContainerOptionsBuilder::default()
                .path(SECRETS_TARGET)
                .build();
            d.upload_to_container(id, Some(options), bollard::body_full(tar.clone()))
                .await
        })
        .await
    }
}

/// The most of a container's `/run/secrets` read back to learn its file names.
const MAX_LISTING: usize = 4 << 20;

/// The regular files' names in a tar of the `secrets` directory (`secrets/NAME`).
fn file_names(tar: &[u8]) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in tar::Archive::new(tar).entries()? {
        let entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        if let Some(name) = entry.path()?.file_name().and_then(|n| n.to_str()) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

impl Engine {
    /// Empties the secret files of container `id` (a bind of a host directory at
    /// `/run/secrets`) before it is removed: the directory is the engine host's and stays
    /// when the container goes, and Pier may not share that host's filesystem. Each file
    /// is rewritten empty (root, 0400); a container without such a bind is left as it is.
    pub(crate) async fn empty_secret_files(&self, id: &str) -> Result<()> {
        let Some(c) = self.inspect_raw(id).await? else {
            return Ok(());
        };
        let binds = c.host_config.and_then(|h| h.binds).unwrap_or_default();
        if !binds
            .iter()
            .any(|b| b.split(':').nth(1) == Some(SECRETS_TARGET))
        {
            return Ok(());
        }
        let tar = self.secrets_archive(id).await?;
        let names = file_names(&tar).map_err(|e| super::EngineError::Refused {
            action: format!("list secret files of {id}"),
            message: e.to_string(),
        })?;
        let files: Vec<SecretFile> = names
            .into_iter()
            .map(|name| SecretFile {
                name,
                value: Vec::new(),
            })
            .collect();
        if files.is_empty() {
            return Ok(());
        }
        self.put_secret_files(id, &files, FileOwner { uid: 0, gid: 0 })
            .await
    }

    /// The engine's tar of the container's `/run/secrets`, at most [`MAX_LISTING`] bytes.
    async fn secrets_archive(&self, id: &str) -> Result<Vec<u8>> {
        use futures_util::StreamExt;
        let action = format!("read the secret files of container {id}");
        self.call(Call::Read, &action, async |d| {
            let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
                .path(SECRETS_TARGET)
                .build();
            let mut stream = d.download_from_container(id, Some(options));
            let mut out = Vec::new();
            while let Some(chunk) = stream.next().await {
                out.extend_from_slice(&chunk?);
                if out.len() > MAX_LISTING {
                    break;
                }
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_holds_each_file_mode_0400_owned_by_the_user() {
        let files = [SecretFile {
            name: "DB_PASSWORD".into(),
            value: b"s3cret".to_vec(),
        }];
        let tar = archive(&files, FileOwner { uid: 10001, gid: 0 }).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let entries: Vec<_> = a.entries().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(entries.len(), 1);
        let h = entries[0].header();
        assert_eq!(h.path().unwrap().to_str(), Some("DB_PASSWORD"));
        assert_eq!(h.mode().unwrap(), 0o400);
        assert_eq!(h.uid().unwrap(), 10001);
        assert_eq!(h.size().unwrap(), 6);
        assert!(!format!("{files:?}").contains("s3cret"));
        // Read back as the engine lists the directory: `secrets/NAME`.
        let mut listing = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(6);
        h.set_mode(0o400);
        listing
            .append_data(&mut h, "secrets/DB_PASSWORD", &b"s3cret"[..])
            .unwrap();
        let listing = listing.into_inner().unwrap();
        assert_eq!(file_names(&listing).unwrap(), ["DB_PASSWORD"]);
    }
}
