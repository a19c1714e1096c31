//! The tar the engine is sent for a verified archive: Pier's `manifest.json`, then the
//! config and the layers as plain files under the names that manifest gives them, read
//! from the archive at their verified offsets. Each file is hashed again as it is read,
//! and its last chunk is held back unless the hash is still the verified one: a file
//! changed after its check makes the body fail, so the engine never loads it whole.

use std::collections::VecDeque;
use std::io::SeekFrom;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{Entry, VerifiedArchive};

/// Read per chunk: the archive's size is never held in memory.
const CHUNK: u64 = 1 << 20;
const BLOCK: usize = 512;

enum Part {
    Bytes(Bytes),
    File { name: String, entry: Entry },
}

struct Reading {
    name: String,
    left: u64,
    hash: Sha256,
    want: String,
}

/// A stream of the tar's chunks, for the engine's `load` endpoint.
pub struct LoadBody {
    file: tokio::fs::File,
    parts: VecDeque<Part>,
    reading: Option<Reading>,
}

impl LoadBody {
    pub(crate) async fn open(a: &VerifiedArchive) -> std::io::Result<LoadBody> {
        let mut parts = VecDeque::new();
        parts.push_back(Part::Bytes(header(
            "manifest.json",
            a.manifest.len() as u64,
        )?));
        parts.push_back(Part::Bytes(padded(a.manifest.clone())));
        for (name, entry) in &a.files {
            parts.push_back(Part::Bytes(header(name, entry.size)?));
            parts.push_back(Part::File {
                name: name.clone(),
                entry: entry.clone(),
            });
            let pad = padding(entry.size);
            if pad > 0 {
                parts.push_back(Part::Bytes(Bytes::from(vec![0u8; pad])));
            }
        }
        // The end of a tar: two zero blocks.
        parts.push_back(Part::Bytes(Bytes::from(vec![0u8; 2 * BLOCK])));
        Ok(LoadBody {
            file: tokio::fs::File::open(&a.path).await?,
            parts,
            reading: None,
        })
    }

    pub(crate) fn into_stream(self) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> {
        futures_util::stream::unfold(self, |mut b| async move {
            let next = b.next().await?;
            // After an error the body ends: nothing more is sent.
            if next.is_err() {
                b.parts.clear();
                b.reading = None;
            }
            Some((next, b))
        })
    }

    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        loop {
            if let Some(r) = self.reading.as_mut() {
                let n = r.left.min(CHUNK) as usize;
                let mut buf = vec![0u8; n];
                if let Err(e) = self.file.read_exact(&mut buf).await {
                    return Some(Err(e));
                }
                r.hash.update(&buf);
                r.left -= n as u64;
                if r.left == 0 {
                    let r = self.reading.take().expect("reading");
                    if let Err(e) = finished(r) {
                        return Some(Err(e));
                    }
                }
                return Some(Ok(Bytes::from(buf)));
            }
            match self.parts.pop_front()? {
                Part::Bytes(b) => return Some(Ok(b)),
                Part::File { name, entry } => {
                    if let Err(e) = self.file.seek(SeekFrom::Start(entry.offset)).await {
                        return Some(Err(e));
                    }
                    let r = Reading {
                        name,
                        left: entry.size,
                        hash: Sha256::new(),
                        want: entry.sha256,
                    };
                    if r.left == 0 {
                        if let Err(e) = finished(r) {
                            return Some(Err(e));
                        }
                    } else {
                        self.reading = Some(r);
                    }
                }
            }
        }
    }
}

fn finished(r: Reading) -> std::io::Result<()> {
    if hex::encode(r.hash.finalize()) == r.want {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} changed after it was verified; nothing of it was loaded",
            r.name
        )))
    }
}

fn header(name: &str, size: u64) -> std::io::Result<Bytes> {
    let mut h = tar::Header::new_ustar();
    h.set_path(name)?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mtime(0);
    h.set_cksum();
    Ok(Bytes::copy_from_slice(h.as_bytes()))
}

fn padding(size: u64) -> usize {
    (BLOCK - (size % BLOCK as u64) as usize) % BLOCK
}

fn padded(mut bytes: Vec<u8>) -> Bytes {
    let pad = padding(bytes.len() as u64);
    bytes.resize(bytes.len() + pad, 0);
    Bytes::from(bytes)
}
