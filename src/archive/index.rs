//! Pass one over an archive: every entry's place, size and sha256, read once, with caps on
//! the file's size and its number of entries. Only plain names inside the archive are
//! accepted (no absolute paths, no `..` above its root), each at most once.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest as _, Sha256};
use tar::EntryType;

use super::{ArchiveError, Entry, MAX_ARCHIVE_BYTES, MAX_ENTRIES};

/// Links followed from one name before giving up (a loop of links ends here).
const MAX_LINK_HOPS: usize = 8;

enum Node {
    File(Entry),
    /// A symbolic or hard link, its target as a name from the archive's root.
    Link(String),
}

pub(super) struct Index {
    path: PathBuf,
    nodes: HashMap<String, Node>,
}

impl Index {
    pub(super) fn read(path: &Path) -> Result<Index, ArchiveError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len > MAX_ARCHIVE_BYTES {
            return Err(ArchiveError::refused(format!(
                "it is {len} bytes; an import is at most {MAX_ARCHIVE_BYTES}"
            )));
        }
        let mut archive = tar::Archive::new(BufReader::with_capacity(1 << 20, file.take(len)));
        let mut nodes = HashMap::new();
        let mut buf = vec![0u8; 1 << 20];
        let entries = archive
            .entries()
            .map_err(|e| ArchiveError::refused(format!("it is not a tar archive ({e})")))?;
        for (n, entry) in entries.enumerate() {
            if n >= MAX_ENTRIES {
                return Err(ArchiveError::refused(format!(
                    "it has more than {MAX_ENTRIES} entries"
                )));
            }
            let mut entry =
                entry.map_err(|e| ArchiveError::refused(format!("a tar entry is broken ({e})")))?;
            let raw = entry
                .path()
                .map_err(|_| ArchiveError::refused("an entry name is not valid"))?;
            let name = normal(Path::new(""), &raw)?;
            let node = match entry.header().entry_type() {
                EntryType::Directory | EntryType::XGlobalHeader => continue,
                EntryType::Regular | EntryType::Continuous => {
                    let offset = entry.raw_file_position();
                    let size = entry.size();
                    let mut hash = Sha256::new();
                    loop {
                        let k = entry.read(&mut buf)?;
                        if k == 0 {
                            break;
                        }
                        hash.update(&buf[..k]);
                    }
                    Node::File(Entry {
                        offset,
                        size,
                        sha256: hex::encode(hash.finalize()),
                    })
                }
                kind @ (EntryType::Symlink | EntryType::Link) => {
                    let target = entry.link_name().ok().flatten().ok_or_else(|| {
                        ArchiveError::refused(format!("link {name} has no target"))
                    })?;
                    // A symlink is relative to its own folder; a hard link names from the root.
                    let base = match kind {
                        EntryType::Symlink => Path::new(&name).parent().unwrap_or(Path::new("")),
                        _ => Path::new(""),
                    };
                    Node::Link(normal(base, &target)?)
                }
                other => {
                    return Err(ArchiveError::refused(format!(
                        "entry {name} is a {other:?}, not a file, folder or link"
                    )));
                }
            };
            if nodes.insert(name.clone(), node).is_some() {
                return Err(ArchiveError::refused(format!("it names {name} twice")));
            }
        }
        Ok(Index {
            path: path.to_owned(),
            nodes,
        })
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.nodes.contains_key(name)
    }

    /// The file `name` stands for, through links; `None` if the archive has no such file.
    pub(super) fn file(&self, name: &str) -> Result<Option<(&str, &Entry)>, ArchiveError> {
        let mut at = name;
        for _ in 0..MAX_LINK_HOPS {
            match self.nodes.get_key_value(at) {
                None => return Ok(None),
                Some((k, Node::File(e))) => return Ok(Some((k.as_str(), e))),
                Some((_, Node::Link(to))) => at = to,
            }
        }
        Err(ArchiveError::refused(format!(
            "{name} is a chain of more than {MAX_LINK_HOPS} links"
        )))
    }

    /// A small file's bytes (a manifest, a config), read again and checked against the
    /// hash of pass one: what is parsed is what was hashed.
    pub(super) fn read_small(&self, name: &str, cap: u64) -> Result<Vec<u8>, ArchiveError> {
        let Some((_, e)) = self.file(name)? else {
            return Err(ArchiveError::refused(format!("it has no {name}")));
        };
        if e.size > cap {
            return Err(ArchiveError::refused(format!(
                "{name} is {} bytes; at most {cap} are read",
                e.size
            )));
        }
        let mut f = File::open(&self.path)?;
        f.seek(SeekFrom::Start(e.offset))?;
        let mut bytes = vec![0u8; e.size as usize];
        f.read_exact(&mut bytes)?;
        if hex::encode(Sha256::digest(&bytes)) != e.sha256 {
            return Err(ArchiveError::refused(format!(
                "{name} changed while it was read"
            )));
        }
        Ok(bytes)
    }
}

/// `raw` as a plain name from the archive's root, seen from folder `base`: `./` dropped,
/// `..` resolved; anything absolute or above the root is refused.
fn normal(base: &Path, raw: &Path) -> Result<String, ArchiveError> {
    let unsafe_name =
        || ArchiveError::refused(format!("entry name {} leaves the archive", raw.display()));
    let mut parts: Vec<String> = Vec::new();
    for c in base.components().chain(raw.components()) {
        match c {
            Component::CurDir => {}
            Component::Normal(p) => parts.push(p.to_str().ok_or_else(unsafe_name)?.to_owned()),
            Component::ParentDir => {
                parts.pop().ok_or_else(unsafe_name)?;
            }
            Component::RootDir | Component::Prefix(_) => return Err(unsafe_name()),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_and_never_leave_the_archive() {
        let n = |b: &str, r: &str| normal(Path::new(b), Path::new(r));
        assert_eq!(n("", "./manifest.json").unwrap(), "manifest.json");
        assert_eq!(n("abc", "../def/layer.tar").unwrap(), "def/layer.tar");
        assert_eq!(n("", "blobs/sha256/ab").unwrap(), "blobs/sha256/ab");
        assert!(n("", "/etc/passwd").is_err());
        assert!(n("abc", "../../x").is_err());
        assert!(n("", "../x").is_err());
    }
}
