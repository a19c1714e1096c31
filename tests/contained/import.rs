//! `pier import APP ARCHIVE.tar` deploys from a docker-save archive through the
//! journaled pipeline; an archive whose image id or platform is not the expected one
//! deploys nothing. The archive's own bytes are verified whatever the engine
//! holds, and an OCI image layout is converted for Docker 20.10.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// Removes the images a test loaded (its own versions only), whatever happens to the test.
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = docker_cli(&["rmi", "-f", id]);
        }
    }
}

#[tokio::test]
async fn an_archive_deploys_only_when_its_image_id_and_platform_are_the_expected_ones() {
    let env = TestEnv::builder().without_notifications().start().await;
    let app = env.app().to_owned();
    // An archive of v1, made on a connected machine; the engine then forgets the image.
    // A version of its own: its image is removed below, and another test (sharing the
    // engine) may be running the common `v1`, which the engine then refuses to remove.
    let version = format!("v1-{}", random_hex(8));
    let digest = env.push(&TestImage::healthy(&version), "main").await;
    let reference = format!("{}@{digest}", env.image());
    let (ok, out) = docker_cli(&["pull", &reference]);
    assert!(ok, "{out}");
    let (ok, id) = docker_cli(&["image", "inspect", "--format", "{{.Id}}", &reference]);
    assert!(ok, "{id}");
    let id = id.trim().to_owned();
    let _images = Images(vec![id.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("v1.tar");
    let archive_s = archive.to_string_lossy().into_owned();
    let (ok, out) = docker_cli(&["save", "-o", &archive_s, &reference]);
    assert!(ok, "{out}");
    let (ok, out) = docker_cli(&["rmi", "-f", &id]);
    assert!(ok, "{out}");

    let wrong = format!("sha256:{}", "0".repeat(64));
    import(&env, &app, &archive_s, &["--digest", &wrong]).await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert!(
        d["error"].as_str().unwrap().contains("digest mismatch"),
        "{d:#}"
    );
    nothing_made(&env, &app, "wrong id").await;

    import(
        &env,
        &app,
        &archive_s,
        &["--digest", &id, "--platform", "linux/arm64"],
    )
    .await;
    let d2 = env
        .latest_final_of(&app, &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    assert!(
        d2["error"].as_str().unwrap().contains("platform mismatch"),
        "{d2:#}"
    );
    nothing_made(&env, &app, "wrong platform").await;

    import(&env, &app, &archive_s, &["--digest", &id]).await;
    let d3 = env
        .latest_final_of(
            &app,
            &[d["id"].as_str().unwrap(), d2["id"].as_str().unwrap()],
            DEPLOY,
        )
        .await;
    assert_eq!(d3["state"], "succeeded", "{d3:#}");
    assert_eq!(d3["resolved_digest"], id.as_str());
    env.wait_app_version(&version, Duration::from_secs(10))
        .await;
    let steps: Vec<String> = env
        .deployment_final(d3["id"].as_str().unwrap(), DEPLOY)
        .await["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        steps,
        [
            "resolve", "network", "create", "stop_old", "start", "health", "switch", "retire"
        ]
    );
    env.cleanup().await;
}

/// v1's archive saved while v1 stays in the engine; v2 is deployed from its own archive;
/// then a copy of v1's archive with one byte of its config changed is imported under v1's
/// id. The engine still holds v1, but the archive does not: it is refused before anything
/// is loaded, and v2 keeps serving.
#[tokio::test]
async fn a_tampered_archive_is_refused_even_when_its_image_is_loaded() {
    let env = TestEnv::builder().without_notifications().start().await;
    let app = env.app().to_owned();
    let dir = tempfile::tempdir().unwrap();
    // Versions of their own: images no other test uses, so removing them at the end is safe.
    let tag = random_hex(8);
    let (one, two) = (format!("v1-{tag}"), format!("v2-{tag}"));
    let (v1, v1_tar) = saved(&env, &TestImage::healthy(&one), dir.path()).await;
    let (v2, v2_tar) = saved(&env, &TestImage::healthy(&two), dir.path()).await;
    let mut images = Images(vec![v1.clone(), v2.clone()]);
    import(&env, &app, &v2_tar, &["--digest", &v2]).await;
    let d2 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    env.wait_app_version(&two, Duration::from_secs(10)).await;

    let tampered = dir.path().join("v1-tampered.tar");
    let changed = with_config_byte_changed(Path::new(&v1_tar), &tampered);
    assert_ne!(changed, v1, "the copy's config is another one");
    images.0.push(changed.clone());
    assert!(
        docker_cli(&["image", "inspect", &v1]).0,
        "v1 is still in the engine"
    );
    let tampered = tampered.to_string_lossy().into_owned();
    import(&env, &app, &tampered, &["--digest", &v1]).await;
    let d = env
        .latest_final_of(&app, &[d2["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("digest mismatch") && error.contains(&changed),
        "{error}"
    );
    assert!(
        !docker_cli(&["image", "inspect", &changed]).0,
        "the tampered image was loaded"
    );
    env.wait_app_version(&two, Duration::from_secs(10)).await;
    assert_eq!(env.running_digests_of(&app).await.len(), 1);
    env.cleanup().await;
}

/// An OCI image layout (index.json, blobs) is what Docker 20.10 cannot `docker load`:
/// Pier verifies it and sends the engine a docker-save tar of the same blobs.
#[tokio::test]
async fn an_oci_layout_archive_is_verified_converted_and_deployed() {
    let env = TestEnv::builder().without_notifications().start().await;
    let app = env.app().to_owned();
    // A version of its own: an image id (the config's digest) no other test has loaded.
    let version = format!("oci-{}", random_hex(8));
    let built = TestImage::healthy(&version).build("amd64");
    let id = sha256_digest(&built.config);
    let _images = Images(vec![id.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("oci.tar");
    write_oci_layout(&built, &archive);
    let archive = archive.to_string_lossy().into_owned();

    // The same layout under another id is refused before anything is loaded.
    let wrong = format!("sha256:{}", "1".repeat(64));
    import(&env, &app, &archive, &["--digest", &wrong]).await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert!(
        d["error"].as_str().unwrap().contains("digest mismatch"),
        "{d:#}"
    );
    assert!(!docker_cli(&["image", "inspect", &id]).0, "loaded anyway");

    import(&env, &app, &archive, &["--digest", &id]).await;
    let d2 = env
        .latest_final_of(&app, &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    assert_eq!(d2["resolved_digest"], id.as_str());
    env.wait_app_version(&version, Duration::from_secs(10))
        .await;
    env.cleanup().await;
}

/// Pushes `image`, pulls it, saves it to `dir`: (its image id, the archive's path). The
/// image stays in the engine.
async fn saved(env: &TestEnv, image: &TestImage, dir: &Path) -> (String, String) {
    let digest = env.push(image, image.version()).await;
    let reference = format!("{}@{digest}", env.image());
    let (ok, out) = docker_cli(&["pull", &reference]);
    assert!(ok, "{out}");
    let (ok, id) = docker_cli(&["image", "inspect", "--format", "{{.Id}}", &reference]);
    assert!(ok, "{id}");
    let archive = dir.join(format!("{}.tar", image.version()));
    let archive = archive.to_string_lossy().into_owned();
    let (ok, out) = docker_cli(&["save", "-o", &archive, &reference]);
    assert!(ok, "{out}");
    (id.trim().to_owned(), archive)
}

/// Copies a docker-save archive with one byte of its config (`<id>.json`) changed, the
/// JSON still valid; returns the changed config's digest.
fn with_config_byte_changed(from: &Path, to: &Path) -> String {
    let mut input = tar::Archive::new(std::fs::File::open(from).unwrap());
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    let mut changed = None;
    for entry in input.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        let mut header = entry.header().clone();
        if path.ends_with(".json") && !path.contains('/') && path != "manifest.json" {
            let at = find(&data, b"00:00:00Z").expect("a created time in the config");
            data[at + 7] = b'1';
            changed = Some(sha256_digest(&data));
        }
        header.set_cksum();
        out.append(&header, data.as_slice()).unwrap();
    }
    out.finish().unwrap();
    changed.expect("the archive has a config")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An OCI image layout of one image, as `skopeo copy … oci-archive:` writes it.
fn write_oci_layout(built: &BuiltImage, to: &Path) {
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_INDEX,
        "manifests": [{
            "mediaType": MT_OCI_MANIFEST,
            "digest": built.digest,
            "size": built.manifest.len(),
            "platform": { "os": "linux", "architecture": "amd64" },
        }],
    });
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        out.append_data(&mut h, name, data).unwrap();
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    add("index.json", &serde_json::to_vec(&index).unwrap());
    for blob in [&built.manifest, &built.config, &built.layer] {
        let hex = sha256_digest(blob).trim_start_matches("sha256:").to_owned();
        add(&format!("blobs/sha256/{hex}"), blob);
    }
    out.finish().unwrap();
}

async fn import(env: &TestEnv, app: &str, archive: &str, args: &[&str]) {
    let mut all = vec!["import", app, archive];
    all.extend_from_slice(args);
    let out = env.pier().run_cli(&all).await;
    assert!(out.status.success(), "{out:?}");
}

async fn nothing_made(env: &TestEnv, app: &str, what: &str) {
    assert!(
        env.engine.containers_of_app(app).await.is_empty(),
        "{what}: a container was made"
    );
    assert!(
        !docker_cli(&["network", "inspect", &format!("pier-{app}")]).0,
        "{what}: the network was made"
    );
}
