//! `pier import`'s archive, verified from its own bytes before anything is loaded: the
//! config must hash to the expected image id, every layer to what the manifest (or the
//! config's `diff_ids`) names, and the platform must be the expected one. What the engine
//! already holds proves nothing about the archive: a copy of v1's archive with one byte of
//! its config changed loads as another image, and v1's id is still found on the engine.
//!
//! Two formats are accepted: a docker-save archive (`manifest.json`) and an OCI image
//! layout (`oci-layout`, `index.json`, `blobs/sha256/…`). Docker 20.10 loads only the
//! first, so the engine is always sent a docker-save tar made from the verified entries
//! (see [`body`]): its own `manifest.json`, the config and the layers, each re-hashed while
//! it is sent, so that a file changed after its check never reaches the engine whole.

mod body;
mod formats;
mod index;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use body::LoadBody;

/// Caps on what an archive may hold: every input a cap.
pub(crate) const MAX_ARCHIVE_BYTES: u64 = 8 << 30;
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// `manifest.json`, `index.json`, a manifest or a config.
pub(crate) const MAX_JSON_BYTES: u64 = 4 << 20;
pub(crate) const MAX_LAYERS: usize = 128;

/// The archive's layout, as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveFormat {
    DockerSave,
    OciLayout,
}

impl std::fmt::Display for ArchiveFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArchiveFormat::DockerSave => "docker-save archive",
            ArchiveFormat::OciLayout => "OCI image layout",
        })
    }
}

/// What an import must hold.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// `sha256:<hex>`: the image id, the digest of the image's config.
    pub image_id: String,
    /// `os/arch[/variant]`; only os and architecture are compared.
    pub platform: String,
}

/// Why an archive is refused. The words are the deployment's error: they name what was
/// found and what was expected, never more of the file than its entry names.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("digest mismatch: {0}")]
    DigestMismatch(String),
    #[error("platform mismatch: the archive's image is {found}, expected {wanted}")]
    PlatformMismatch { found: String, wanted: String },
    #[error("the archive is refused: {0}")]
    Refused(String),
    #[error("the archive could not be read: {0}")]
    Io(#[from] std::io::Error),
}

impl ArchiveError {
    fn refused(why: impl Into<String>) -> Self {
        ArchiveError::Refused(why.into())
    }
}

/// One file of the archive, as verified: where its bytes are and what they hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub offset: u64,
    pub size: u64,
    /// Lower-case hex sha256 of the bytes.
    pub sha256: String,
}

/// An archive whose bytes were checked against the expected image: what the engine is
/// sent, and nothing else (no tags: loading adds an image and nothing else).
#[derive(Debug, Clone)]
pub struct VerifiedArchive {
    pub path: PathBuf,
    pub format: ArchiveFormat,
    pub image_id: String,
    /// `os/arch[/variant]` from the verified config.
    pub platform: String,
    /// The docker-save `manifest.json` Pier wrote for the engine.
    pub manifest: Vec<u8>,
    /// The config and the layers, by the names `manifest` gives them.
    pub files: Vec<(String, Entry)>,
}

/// Reads the whole archive once (on a blocking thread: it may be gigabytes), then checks
/// it against `wanted`. Nothing is sent to the engine here.
pub async fn verify(path: &Path, wanted: &Wanted) -> Result<VerifiedArchive, ArchiveError> {
    let path = path.to_owned();
    let wanted = wanted.clone();
    tokio::task::spawn_blocking(move || {
        let ix = index::Index::read(&path)?;
        let found = formats::check(&ix, &wanted)?;
        Ok(VerifiedArchive {
            path,
            format: found.format,
            image_id: wanted.image_id.clone(),
            platform: found.platform,
            manifest: found.manifest,
            files: found.files,
        })
    })
    .await
    .map_err(|e| ArchiveError::Io(std::io::Error::other(e.to_string())))?
}
