//! The archive checks on archives written here: pure logic over files, no engine.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};

use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};

use super::*;

fn sha(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

fn tar_of(files: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    let mut b = tar::Builder::new(f.reopen().unwrap());
    for (name, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.finish().unwrap();
    f
}

fn config(layer: &[u8], arch: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "created": "2024-01-01T00:00:00Z",
        "architecture": arch,
        "os": "linux",
        "rootfs": { "type": "layers", "diff_ids": [sha(layer)] },
    }))
    .unwrap()
}

fn wanted(id: &str) -> Wanted {
    Wanted {
        image_id: id.to_owned(),
        platform: "linux/amd64".into(),
    }
}

const LAYER: &[u8] = b"pretend this is a layer tar";

/// A docker-save archive of one image: its id, and the archive.
fn docker_save(cfg: &[u8], layer: &[u8], images: usize) -> (String, tempfile::NamedTempFile) {
    let id = sha(&config(LAYER, "amd64"));
    let cfg_name = format!("{}.json", id.trim_start_matches("sha256:"));
    let item = serde_json::json!({
        "Config": cfg_name, "RepoTags": ["acme/web:v1"], "Layers": ["abc/layer.tar"],
    });
    let manifest = serde_json::to_vec(&vec![item; images]).unwrap();
    let f = tar_of(&[
        ("abc/layer.tar", layer),
        (&cfg_name, cfg),
        ("manifest.json", &manifest),
    ]);
    (id, f)
}

async fn check(f: &tempfile::NamedTempFile, id: &str) -> Result<VerifiedArchive, ArchiveError> {
    verify(f.path(), &wanted(id)).await
}

#[tokio::test]
async fn a_docker_save_archive_verifies_and_is_sent_as_its_verified_files_without_tags() {
    let cfg = config(LAYER, "amd64");
    let (id, f) = docker_save(&cfg, LAYER, 1);
    let v = check(&f, &id).await.unwrap();
    assert_eq!(v.format, ArchiveFormat::DockerSave);
    assert_eq!(v.platform, "linux/amd64");
    let m: serde_json::Value = serde_json::from_slice(&v.manifest).unwrap();
    assert_eq!(m[0]["RepoTags"], serde_json::Value::Null);
    assert_eq!(m[0]["Layers"], serde_json::json!(["abc/layer.tar"]));

    let sent = sent(&v).await.unwrap();
    let mut names = vec![];
    for e in tar::Archive::new(sent.as_slice()).entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = vec![];
        e.read_to_end(&mut data).unwrap();
        let want: &[u8] = match name.as_str() {
            "manifest.json" => &v.manifest,
            "abc/layer.tar" => LAYER,
            _ => &cfg,
        };
        assert_eq!(data, want, "{name}");
        names.push(name);
    }
    assert_eq!(names.len(), 3, "{names:?}");
}

#[tokio::test]
async fn one_changed_byte_in_the_config_or_a_layer_is_a_digest_mismatch() {
    let mut cfg = config(LAYER, "amd64");
    let at = cfg.iter().position(|b| *b == b'0').unwrap();
    cfg[at] = b'1';
    let (id, f) = docker_save(&cfg, LAYER, 1);
    let e = check(&f, &id).await.unwrap_err();
    assert!(matches!(e, ArchiveError::DigestMismatch(_)), "{e}");
    assert!(e.to_string().contains(&sha(&cfg)), "{e}");

    let (id, f) = docker_save(&config(LAYER, "amd64"), b"pretend this is a layer taR", 1);
    let e = check(&f, &id).await.unwrap_err();
    assert!(e.to_string().contains("layer 0"), "{e}");
}

#[tokio::test]
async fn two_images_another_platform_or_an_unknown_layout_are_refused_by_name() {
    let (id, f) = docker_save(&config(LAYER, "amd64"), LAYER, 2);
    let e = check(&f, &id).await.unwrap_err();
    assert!(e.to_string().contains("holds 2 images"), "{e}");

    let cfg = config(LAYER, "arm64");
    let cfg_name = format!("{}.json", sha(&cfg).trim_start_matches("sha256:"));
    let manifest = format!(r#"[{{"Config":"{cfg_name}","Layers":["l.tar"]}}]"#);
    let f = tar_of(&[
        ("l.tar", LAYER),
        (&cfg_name, &cfg),
        ("manifest.json", manifest.as_bytes()),
    ]);
    let e = check(&f, &sha(&cfg)).await.unwrap_err();
    assert!(matches!(e, ArchiveError::PlatformMismatch { .. }), "{e}");

    let f = tar_of(&[("repositories", b"{}")]);
    let e = check(&f, &id).await.unwrap_err();
    assert!(
        e.to_string().contains("docker-save") && e.to_string().contains("OCI image layout"),
        "{e}"
    );
}

/// An OCI layout of one image whose layer has media type `layer_type`.
fn oci(layer_type: &str) -> (String, tempfile::NamedTempFile) {
    let cfg = config(LAYER, "amd64");
    let desc = |mt: &str, b: &[u8]| serde_json::json!({"mediaType": mt, "digest": sha(b), "size": b.len()});
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": desc("application/vnd.oci.image.config.v1+json", &cfg),
        "layers": [desc(layer_type, LAYER)],
    }))
    .unwrap();
    let mut top = desc("application/vnd.oci.image.manifest.v1+json", &manifest);
    top["platform"] = serde_json::json!({"os": "linux", "architecture": "amd64"});
    let index =
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [top]})).unwrap();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha(b).trim_start_matches("sha256:"));
    let f = tar_of(&[
        ("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("index.json", &index),
        (&blob(&manifest), &manifest),
        (&blob(&cfg), &cfg),
        (&blob(LAYER), LAYER),
    ]);
    (sha(&cfg), f)
}

#[tokio::test]
async fn an_oci_layout_is_checked_blob_by_blob_and_a_layer_docker_cannot_load_is_refused() {
    let (id, f) = oci("application/vnd.oci.image.layer.v1.tar");
    let v = check(&f, &id).await.unwrap();
    assert_eq!(v.format, ArchiveFormat::OciLayout);
    let m: serde_json::Value = serde_json::from_slice(&v.manifest).unwrap();
    assert_eq!(
        m[0]["Config"],
        format!("blobs/sha256/{}", id.trim_start_matches("sha256:"))
    );

    let (id, f) = oci("application/vnd.oci.image.layer.v1.tar+zstd");
    let e = check(&f, &id).await.unwrap_err();
    assert!(e.to_string().contains("zstd"), "{e}");

    let (_, f) = oci("application/vnd.oci.image.layer.v1.tar");
    let e = check(&f, &sha(b"another config")).await.unwrap_err();
    assert!(matches!(e, ArchiveError::DigestMismatch(_)), "{e}");
}

#[tokio::test]
async fn a_file_changed_after_it_was_verified_never_reaches_the_engine_whole() {
    let big = vec![7u8; 3 << 20];
    let cfg = config(&big, "amd64");
    let cfg_name = format!("{}.json", sha(&cfg).trim_start_matches("sha256:"));
    let manifest = format!(r#"[{{"Config":"{cfg_name}","Layers":["l.tar"]}}]"#);
    let f = tar_of(&[
        ("l.tar", &big),
        (&cfg_name, &cfg),
        ("manifest.json", manifest.as_bytes()),
    ]);
    let v = check(&f, &sha(&cfg)).await.unwrap();
    let (_, layer) = v.files.iter().find(|(n, _)| n == "l.tar").unwrap();
    let mut w = f.reopen().unwrap();
    w.seek(SeekFrom::Start(layer.offset + layer.size - 1))
        .unwrap();
    w.write_all(&[8]).unwrap();
    w.flush().unwrap();

    let e = sent(&v).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("l.tar changed after it was verified"),
        "{e}"
    );
}

/// The whole body the engine would be sent, or its first error.
async fn sent(v: &VerifiedArchive) -> std::io::Result<Vec<u8>> {
    let mut s = std::pin::pin!(LoadBody::open(v).await?.into_stream());
    let mut out = vec![];
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}
