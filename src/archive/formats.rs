//! What an archive's entries mean, per format, checked against the expected image: the one
//! image it holds, its config (hashing to the image id), its layers (hashing to what names
//! them) and its platform. The result is the docker-save manifest the engine is sent.

use serde::{Deserialize, Serialize};

use super::index::Index;
use super::{ArchiveError, ArchiveFormat, Entry, MAX_JSON_BYTES, MAX_LAYERS, Wanted};

pub(super) struct Found {
    pub format: ArchiveFormat,
    pub platform: String,
    pub manifest: Vec<u8>,
    pub files: Vec<(String, Entry)>,
}

/// docker-save's `manifest.json`: one item per image.
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
struct SaveItem {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct ImageConfig {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    variant: Option<String>,
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<DescPlatform>,
}

#[derive(Deserialize, Clone)]
struct DescPlatform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct OciIndex {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct OciManifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// Manifests one index may name (platforms, attestations); each nested index is read.
const MAX_INDEX_ENTRIES: usize = 64;

const MANIFESTS: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];
const INDEXES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// Layers Docker 20.10 loads (it gunzips what is compressed); zstd and foreign layers are
/// refused up front rather than left to an unclear engine error.
const LAYERS: [&str; 4] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
];

pub(super) fn check(ix: &Index, wanted: &Wanted) -> Result<Found, ArchiveError> {
    if ix.has("manifest.json") {
        docker_save(ix, wanted)
    } else if ix.has("oci-layout") && ix.has("index.json") {
        oci_layout(ix, wanted)
    } else {
        Err(ArchiveError::refused(
            "it is neither a docker-save archive (manifest.json) nor an OCI image layout \
             (oci-layout, index.json); formats accepted: those two, as a tar",
        ))
    }
}

fn parse<T: for<'de> Deserialize<'de>>(ix: &Index, name: &str) -> Result<T, ArchiveError> {
    let bytes = ix.read_small(name, MAX_JSON_BYTES)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ArchiveError::refused(format!("{name} is not what its format says ({e})")))
}

fn docker_save(ix: &Index, wanted: &Wanted) -> Result<Found, ArchiveError> {
    let items: Vec<SaveItem> = parse(ix, "manifest.json")?;
    let [item] = items.as_slice() else {
        return Err(ArchiveError::refused(format!(
            "it holds {} images; an import loads exactly one",
            items.len()
        )));
    };
    let (config_name, config) = entry(ix, &item.config)?;
    if digest_of(config) != wanted.image_id {
        return Err(ArchiveError::DigestMismatch(format!(
            "the archive's config is {}, not image {}",
            digest_of(config),
            wanted.image_id
        )));
    }
    let cfg: ImageConfig = parse(ix, config_name)?;
    let platform = platform_of(&cfg, wanted)?;
    layer_count(item.layers.len(), cfg.rootfs.diff_ids.len())?;
    let mut files = vec![(config_name.to_owned(), config.clone())];
    for (i, (name, diff_id)) in item.layers.iter().zip(&cfg.rootfs.diff_ids).enumerate() {
        let (name, layer) = entry(ix, name)?;
        if digest_of(layer) != *diff_id {
            return Err(ArchiveError::DigestMismatch(format!(
                "layer {i} ({name}) is {}, but the config names {diff_id}",
                digest_of(layer)
            )));
        }
        files.push((name.to_owned(), layer.clone()));
    }
    Ok(found(ArchiveFormat::DockerSave, platform, files))
}

fn oci_layout(ix: &Index, wanted: &Wanted) -> Result<Found, ArchiveError> {
    let index: OciIndex = parse(ix, "index.json")?;
    let manifest = pick(ix, &index.manifests, wanted, 0)?;
    let (manifest_name, _) = blob(ix, &manifest)?;
    let m: OciManifest = parse(ix, manifest_name)?;
    if m.config.digest != wanted.image_id {
        return Err(ArchiveError::DigestMismatch(format!(
            "the archive's config is {}, not image {}",
            m.config.digest, wanted.image_id
        )));
    }
    let (config_name, config) = blob(ix, &m.config)?;
    let cfg: ImageConfig = parse(ix, config_name)?;
    let platform = platform_of(&cfg, wanted)?;
    layer_count(m.layers.len(), cfg.rootfs.diff_ids.len())?;
    let mut files = vec![(config_name.to_owned(), config.clone())];
    for (i, d) in m.layers.iter().enumerate() {
        if !LAYERS.contains(&d.media_type.as_str()) {
            return Err(ArchiveError::refused(format!(
                "layer {i} is {}; Docker 20.10 loads only uncompressed or gzip tar layers",
                d.media_type
            )));
        }
        let (name, layer) = blob(ix, d)?;
        files.push((name.to_owned(), layer.clone()));
    }
    Ok(found(ArchiveFormat::OciLayout, platform, files))
}

/// The one image manifest for the wanted platform, through at most one nested index.
fn pick(
    ix: &Index,
    descriptors: &[Descriptor],
    wanted: &Wanted,
    depth: usize,
) -> Result<Descriptor, ArchiveError> {
    if descriptors.len() > MAX_INDEX_ENTRIES {
        return Err(ArchiveError::refused(format!(
            "an index names {} manifests; at most {MAX_INDEX_ENTRIES}",
            descriptors.len()
        )));
    }
    let (os, arch) = os_arch(&wanted.platform);
    let mut out = Vec::new();
    for d in descriptors {
        if d.platform
            .as_ref()
            .is_some_and(|p| p.os != os || p.architecture != arch)
        {
            continue;
        }
        if MANIFESTS.contains(&d.media_type.as_str()) {
            out.push(d.clone());
        } else if INDEXES.contains(&d.media_type.as_str()) && depth == 0 {
            let (name, _) = blob(ix, d)?;
            let nested: OciIndex = parse(ix, name)?;
            out.push(pick(ix, &nested.manifests, wanted, 1)?);
        }
    }
    match out.len() {
        1 => Ok(out.remove(0)),
        0 => Err(ArchiveError::PlatformMismatch {
            found: "no image for it in index.json".into(),
            wanted: wanted.platform.clone(),
        }),
        n => Err(ArchiveError::refused(format!(
            "it holds {n} images for {}; an import loads exactly one",
            wanted.platform
        ))),
    }
}

/// The blob a descriptor names, which must hash to its digest and have its size.
fn blob<'a>(ix: &'a Index, d: &Descriptor) -> Result<(&'a str, &'a Entry), ArchiveError> {
    let hex = d
        .digest
        .strip_prefix("sha256:")
        .filter(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        })
        .ok_or_else(|| ArchiveError::refused(format!("digest {} is not a sha256 one", d.digest)))?;
    let (name, e) = entry(ix, &format!("blobs/sha256/{hex}"))?;
    if e.sha256 != hex || e.size != d.size {
        return Err(ArchiveError::DigestMismatch(format!(
            "blob {} holds {} ({} bytes, {} named)",
            d.digest,
            digest_of(e),
            e.size,
            d.size
        )));
    }
    Ok((name, e))
}

fn entry<'a>(ix: &'a Index, name: &str) -> Result<(&'a str, &'a Entry), ArchiveError> {
    ix.file(name)?
        .ok_or_else(|| ArchiveError::refused(format!("it has no {name}, which its manifest names")))
}

fn digest_of(e: &Entry) -> String {
    format!("sha256:{}", e.sha256)
}

fn layer_count(layers: usize, diff_ids: usize) -> Result<(), ArchiveError> {
    if layers > MAX_LAYERS {
        return Err(ArchiveError::refused(format!(
            "it has {layers} layers; at most {MAX_LAYERS}"
        )));
    }
    if layers != diff_ids {
        return Err(ArchiveError::refused(format!(
            "its manifest names {layers} layers and its config {diff_ids}"
        )));
    }
    Ok(())
}

fn os_arch(platform: &str) -> (&str, &str) {
    let mut p = platform.split('/');
    (p.next().unwrap_or(""), p.next().unwrap_or(""))
}

fn platform_of(cfg: &ImageConfig, wanted: &Wanted) -> Result<String, ArchiveError> {
    let mut found = format!("{}/{}", cfg.os, cfg.architecture);
    if let Some(v) = &cfg.variant {
        found = format!("{found}/{v}");
    }
    if os_arch(&found) != os_arch(&wanted.platform) {
        return Err(ArchiveError::PlatformMismatch {
            found,
            wanted: wanted.platform.clone(),
        });
    }
    Ok(found)
}

/// The docker-save manifest for the verified files: the first is the config, the rest
/// the layers in order. No `RepoTags`: a tag in an archive is not verified by anything.
fn found(format: ArchiveFormat, platform: String, files: Vec<(String, Entry)>) -> Found {
    let item = SaveItem {
        config: files[0].0.clone(),
        repo_tags: None,
        layers: files[1..].iter().map(|(n, _)| n.clone()).collect(),
    };
    let manifest = serde_json::to_vec(&[item]).expect("a manifest serializes");
    // One file per name: an image may use one layer twice; the engine reads it by name.
    let mut seen = std::collections::HashSet::new();
    let files = files
        .into_iter()
        .filter(|(n, _)| seen.insert(n.clone()))
        .collect();
    Found {
        format,
        platform,
        manifest,
        files,
    }
}
