//! Test images built from the static busybox, and pushing them.

use super::*;

// ---------------------------------------------------------------------------------------------
// Test images
// ---------------------------------------------------------------------------------------------

pub const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MT_OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// What a client must accept to see OCI manifests and indexes at all: Distribution 2.8
/// answers 404 MANIFEST_UNKNOWN ("OCI manifest found, but accept header does not support OCI
/// manifests") to a GET/HEAD without it.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// The test images: one layer with the static busybox, `/www/health` ("ok\n") and
/// `/www/version` (the given string, so every version has its own digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestImage {
    /// `busybox httpd -f -p 8080 -h /www` under a shell that exits on SIGTERM;
    /// `GET /health` answers 200 "ok\n".
    Healthy { version: String },
    /// httpd runs, but `/www/health` is missing: `GET /health` is 404 forever.
    NoHealthFile { version: String },
    /// Prints its environment, `$API_TOKEN` base64-encoded (`b64:…`) and a NUL byte
    /// (`nul:\0:end`), as a crashing app's log might, and exits 1 at once.
    ExitsAtOnce { version: String },
    /// Like `Healthy`, plus an image HEALTHCHECK (`busybox wget` of /health every second).
    WithHealthcheck { version: String },
    /// Like `WithHealthcheck`, but the check fails on an engine whose containers get a
    /// file limit of exactly `nofile` (`dockerd --default-ulimit nofile=N:N`): one image,
    /// healthy on every host but one that is configured differently.
    UnhealthyAtNofile { version: String, nofile: u32 },
    /// Like `Healthy`, but on an engine whose containers get a file limit of exactly
    /// `nofile`, httpd serves an empty directory: `GET /health` answers 404 on that host
    /// only, for an app's HTTP health (not an image HEALTHCHECK) to fail there.
    HttpUnhealthyAtNofile { version: String, nofile: u32 },
    /// Like `Healthy`, but httpd starts only after `secs` seconds, or as soon as
    /// `/tmp/release` exists (a test releases it with `docker exec`): a deployment that
    /// spends that long in its `health` step, or until the test has done what it must do
    /// meanwhile, however slow the machine.
    SlowStart { version: String, secs: u32 },
    /// Like `Healthy`, but the image's own labels claim to be Pier's (`pier.managed`,
    /// `pier.app`), as a hostile image might.
    SpoofsLabels { version: String },
    /// Like `Healthy` for `secs` seconds, then the server is killed and the container
    /// exits 1: a version that passes its health check and dies soon after.
    DiesAfter { version: String, secs: u32 },
    /// Like `Healthy`, but its `/tmp` is root's 0755 (as in many base images), and it
    /// writes `/tmp/probe` before it serves: run as a non-root user, it starts only if
    /// its `/tmp` is writable to that user, and exits 1 otherwise. With `as_nobody` the
    /// image itself says `USER 65534:65534`.
    WritesTmp { version: String, as_nobody: bool },
    /// Like `Healthy` on 8080, plus a second httpd on 9090 (a "metrics" port, the same
    /// files) and a UDP echo on 5353 (`/bin/udp-echo`, see `udp_echo.rs`).
    SeveralPorts { version: String },
}

impl TestImage {
    pub fn healthy(version: &str) -> Self {
        TestImage::Healthy {
            version: version.to_owned(),
        }
    }
    pub fn no_health_file(version: &str) -> Self {
        TestImage::NoHealthFile {
            version: version.to_owned(),
        }
    }
    pub fn exits_at_once(version: &str) -> Self {
        TestImage::ExitsAtOnce {
            version: version.to_owned(),
        }
    }
    pub fn with_healthcheck(version: &str) -> Self {
        TestImage::WithHealthcheck {
            version: version.to_owned(),
        }
    }

    pub fn unhealthy_at_nofile(version: &str, nofile: u32) -> Self {
        TestImage::UnhealthyAtNofile {
            version: version.to_owned(),
            nofile,
        }
    }

    pub fn http_unhealthy_at_nofile(version: &str, nofile: u32) -> Self {
        TestImage::HttpUnhealthyAtNofile {
            version: version.to_owned(),
            nofile,
        }
    }

    pub fn slow_start(version: &str, secs: u32) -> Self {
        TestImage::SlowStart {
            version: version.to_owned(),
            secs,
        }
    }

    pub fn dies_after(version: &str, secs: u32) -> Self {
        TestImage::DiesAfter {
            version: version.to_owned(),
            secs,
        }
    }

    pub fn writes_tmp(version: &str) -> Self {
        TestImage::WritesTmp {
            version: version.to_owned(),
            as_nobody: false,
        }
    }

    pub fn writes_tmp_as_nobody(version: &str) -> Self {
        TestImage::WritesTmp {
            version: version.to_owned(),
            as_nobody: true,
        }
    }

    pub fn several_ports(version: &str) -> Self {
        TestImage::SeveralPorts {
            version: version.to_owned(),
        }
    }

    pub fn spoofs_labels(version: &str) -> Self {
        TestImage::SpoofsLabels {
            version: version.to_owned(),
        }
    }

    pub fn version(&self) -> &str {
        match self {
            TestImage::SlowStart { version, .. } | TestImage::DiesAfter { version, .. } => version,
            TestImage::Healthy { version }
            | TestImage::NoHealthFile { version }
            | TestImage::ExitsAtOnce { version }
            | TestImage::WithHealthcheck { version }
            | TestImage::UnhealthyAtNofile { version, .. }
            | TestImage::HttpUnhealthyAtNofile { version, .. }
            | TestImage::SpoofsLabels { version }
            | TestImage::SeveralPorts { version }
            | TestImage::WritesTmp { version, .. } => version,
        }
    }

    /// Builds the blobs and manifest for `architecture` (`amd64`, `arm64`, ...). The busybox
    /// binary is the host's (amd64) either way; only the config says otherwise.
    pub fn build(&self, architecture: &str) -> BuiltImage {
        let with_health_file = !matches!(self, TestImage::NoHealthFile { .. });
        let tmp_mode = match self {
            TestImage::WritesTmp { .. } => 0o755,
            _ => 0o1777,
        };
        let extra: &[(&str, &[u8])] = match self {
            TestImage::SeveralPorts { .. } => &[("bin/udp-echo", udp_echo())],
            _ => &[],
        };
        let (tar, layer) = build_layer(with_health_file, tmp_mode, self.version(), extra);
        let diff_id = sha256_digest(&tar);

        let slow;
        let entrypoint: Vec<&str> = match self {
            // Prints its environment first, as a crashing app's log might.
            TestImage::ExitsAtOnce { .. } => vec![
                "/bin/busybox",
                "sh",
                "-c",
                "/bin/busybox env; \
                 /bin/busybox printf 'b64:%s\\n' \"$(/bin/busybox printf %s \"$API_TOKEN\" | /bin/busybox base64)\"; \
                 /bin/busybox printf 'nul:\\000:end\\n'; exit 1",
            ],
            TestImage::DiesAfter { secs, .. } => {
                slow = format!(
                    "trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & \
                     /bin/busybox sleep {secs}; kill $!; \
                     /bin/busybox echo 'out of memory: giving up after {secs} s'; exit 1"
                );
                vec!["/bin/busybox", "sh", "-c", &slow]
            }
            TestImage::WritesTmp { .. } => vec![
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM; /bin/busybox touch /tmp/probe || exit 1; \
                 /bin/busybox httpd -f -p 8080 -h /www & wait",
            ],
            // PID 1's limit is the one the engine's default sets.
            TestImage::HttpUnhealthyAtNofile { nofile, .. } => {
                slow = format!(
                    "trap 'exit 0' TERM; home=/www; \
                     /bin/busybox grep -qE 'open files +{nofile} ' /proc/1/limits && home=/tmp; \
                     /bin/busybox httpd -f -p 8080 -h $home & wait"
                );
                vec!["/bin/busybox", "sh", "-c", &slow]
            }
            TestImage::SlowStart { secs, .. } => {
                let ticks = secs * 5;
                slow = format!(
                    "trap 'exit 0' TERM; i=0; \
                     while [ ! -e /tmp/release ] && [ $i -lt {ticks} ]; do \
                     /bin/busybox sleep 0.2; i=$((i+1)); done; \
                     /bin/busybox httpd -f -p 8080 -h /www & wait"
                );
                vec!["/bin/busybox", "sh", "-c", &slow]
            }
            TestImage::SeveralPorts { .. } => vec![
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM; /bin/udp-echo 5353 & \
                 /bin/busybox httpd -f -p 9090 -h /www & \
                 /bin/busybox httpd -f -p 8080 -h /www & wait",
            ],
            // A well-behaved PID 1: exits on SIGTERM (a bare httpd as PID 1 ignores it and
            // every stop would wait out the engine's grace period).
            _ => vec![
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & wait",
            ],
        };
        let mut cfg = serde_json::json!({
            "Entrypoint": entrypoint,
            "ExposedPorts": { "8080/tcp": {} },
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.version": self.version(),
                "pier.test": "true",
            },
        });
        if let TestImage::WritesTmp {
            as_nobody: true, ..
        } = self
        {
            cfg["User"] = "65534:65534".into();
        }
        if let TestImage::SpoofsLabels { .. } = self {
            cfg["Labels"]["pier.managed"] = "true".into();
            cfg["Labels"]["pier.app"] = "someone-else".into();
        }
        if let TestImage::WithHealthcheck { .. } = self {
            cfg["Healthcheck"] = healthcheck(HEALTH_PROBE.to_string());
        }
        if let TestImage::UnhealthyAtNofile { nofile, .. } = self {
            // The app's own limit (its PID 1's), which the engine's default sets; a
            // HEALTHCHECK's exec may be given other limits than the container's.
            let check = format!(
                "! /bin/busybox grep -qE 'open files +{nofile} ' /proc/1/limits && {HEALTH_PROBE}"
            );
            cfg["Healthcheck"] = healthcheck(check);
        }
        let config = serde_json::json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": architecture,
            "os": "linux",
            "config": cfg,
            "rootfs": { "type": "layers", "diff_ids": [diff_id] },
            "history": [{ "created": "2024-01-01T00:00:00Z",
                          "created_by": "pier test harness" }],
        });
        let config = serde_json::to_vec(&config).expect("serialize image config");
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MT_OCI_MANIFEST,
            "config": {
                "mediaType": MT_OCI_CONFIG,
                "digest": sha256_digest(&config),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": MT_OCI_LAYER_GZIP,
                "digest": sha256_digest(&layer),
                "size": layer.len(),
            }],
        });
        let manifest = serde_json::to_vec(&manifest).expect("serialize manifest");
        BuiltImage {
            digest: sha256_digest(&manifest),
            manifest,
            config,
            layer,
            diff_id,
        }
    }
}

/// The probe of the images' HEALTHCHECKs: `/health` asked up to three times, a second
/// apart, so that an httpd still starting on a loaded machine is not a failure (no `-T`:
/// Debian's busybox wget crashes with it; the engine's timeout bounds it). Only a
/// check that cannot pass (the nofile one) fails, within a few seconds.
const HEALTH_PROBE: &str = "for i in 1 2 3; do \
     /bin/busybox wget -q -O /dev/null http://127.0.0.1:8080/health && exit 0; \
     /bin/busybox sleep 1; done; exit 1";

/// A HEALTHCHECK running `check` every second. The engine's timeout is generous (a
/// check's exec is slow on a busy machine, and a timeout counts as a failure; at 1 s it
/// made healthy versions unhealthy in CI); three failures in a row are unhealthy.
fn healthcheck(check: String) -> serde_json::Value {
    serde_json::json!({
        "Test": ["CMD", "/bin/busybox", "sh", "-c", check],
        "Interval": 1_000_000_000u64,
        "Timeout": 20_000_000_000u64,
        "StartPeriod": 0u64,
        "Retries": 3,
    })
}

/// The bytes of one built image.
pub struct BuiltImage {
    /// `sha256:` of `manifest`: the digest the registry stores it under.
    pub digest: String,
    pub manifest: Vec<u8>,
    pub config: Vec<u8>,
    /// The gzip layer blob.
    pub layer: Vec<u8>,
    /// `sha256:` of the uncompressed layer tar.
    pub diff_id: String,
}

fn busybox() -> &'static [u8] {
    static BUSYBOX: OnceLock<Vec<u8>> = OnceLock::new();
    BUSYBOX.get_or_init(|| {
        std::fs::read("/bin/busybox").expect("read /bin/busybox (apt-get install busybox-static)")
    })
}

/// Returns (uncompressed tar, gzip of it), with `/tmp` of `tmp_mode` and the `extra`
/// executables (path, bytes). Deterministic: fixed mtimes, owners and gzip header.
fn build_layer(
    with_health_file: bool,
    tmp_mode: u32,
    version: &str,
    extra: &[(&str, &[u8])],
) -> (Vec<u8>, Vec<u8>) {
    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(1_704_067_200); // 2024-01-01
        h.set_uid(0);
        h.set_gid(0);
        h
    }
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32| {
        let mut h = header(tar::EntryType::Directory, mode, 0);
        b.append_data(&mut h, path, std::io::empty())
            .expect("append dir");
    };
    let file = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]| {
        let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
        b.append_data(&mut h, path, data).expect("append file");
    };
    dir(&mut b, "bin/", 0o755);
    file(&mut b, "bin/busybox", 0o755, busybox());
    for (path, bytes) in extra {
        file(&mut b, path, 0o755, bytes);
    }
    dir(&mut b, "tmp/", tmp_mode);
    dir(&mut b, "www/", 0o755);
    if with_health_file {
        file(&mut b, "www/health", 0o644, b"ok\n");
    }
    file(&mut b, "www/version", 0o644, version.as_bytes());
    // `GET /cgi-bin/slow` answers with the version once `/tmp/release` exists (a test
    // releases it with `docker exec`), or after 60 s: a request held in flight across a
    // switch for exactly as long as the test needs, however slowly a loaded machine deploys.
    dir(&mut b, "www/cgi-bin/", 0o755);
    let slow = format!(
        "#!/bin/busybox sh\ni=0\nwhile [ ! -e /tmp/release ] && [ $i -lt 300 ]; do /bin/busybox sleep 0.2; i=$((i+1)); done\nprintf 'Content-Type: text/plain\\r\\n\\r\\nslow-{version}'\n"
    );
    file(&mut b, "www/cgi-bin/slow", 0o755, slow.as_bytes());
    let tar = b.into_inner().expect("finish tar");

    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("gzip layer");
    let gz = gz.finish().expect("finish gzip");
    (tar, gz)
}

/// Credentials of the registries this test binary started with basic auth, by host.
static REGISTRY_AUTH: std::sync::Mutex<Vec<(String, String, String)>> =
    std::sync::Mutex::new(Vec::new());

pub fn set_registry_auth(host: &str, user: &str, password: &str) {
    REGISTRY_AUTH
        .lock()
        .unwrap()
        .push((host.to_owned(), user.to_owned(), password.to_owned()));
}

pub fn registry_auth(host: &str) -> RegistryAuth {
    REGISTRY_AUTH
        .lock()
        .unwrap()
        .iter()
        .find(|(h, _, _)| h == host)
        .map(|(_, u, p)| RegistryAuth::Basic(u.clone(), p.clone()))
        .unwrap_or(RegistryAuth::Anonymous)
}

pub fn oci_client(host: &str) -> OciClient {
    OciClient::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![host.to_owned()]),
        ..Default::default()
    })
}

pub fn oci_ref(host: &str, repo: &str, tag_or_digest: &str) -> Reference {
    if tag_or_digest.starts_with("sha256:") {
        Reference::with_digest(host.to_owned(), repo.to_owned(), tag_or_digest.to_owned())
    } else {
        Reference::with_tag(host.to_owned(), repo.to_owned(), tag_or_digest.to_owned())
    }
}

/// Pushes the blobs of `img` and then its manifest under `reference` (a tag, or the
/// manifest's own digest for a digest-only push).
async fn push_built(client: &OciClient, host: &str, repo: &str, reference: &str, img: &BuiltImage) {
    let r = oci_ref(host, repo, reference);
    client
        .store_auth_if_needed(host, &registry_auth(host))
        .await;
    for (data, digest) in [
        (&img.layer, sha256_digest(&img.layer)),
        (&img.config, sha256_digest(&img.config)),
    ] {
        let present = client.blob_exists(&r, &digest).await.unwrap_or(false);
        if !present {
            client
                .push_blob(&r, data.clone(), &digest)
                .await
                .unwrap_or_else(|e| panic!("push blob {digest} to {host}/{repo}: {e}"));
        }
    }
    client
        .push_manifest_raw(
            &r,
            img.manifest.clone(),
            reqwest::header::HeaderValue::from_static(MT_OCI_MANIFEST),
        )
        .await
        .unwrap_or_else(|e| panic!("push manifest {host}/{repo}:{reference}: {e}"));
}

/// Pushes `image` (linux/amd64) as `<host>/<repo>:<tag>` with the OCI client, anonymously,
/// over plain HTTP. Returns the manifest digest as the registry reports it for the tag.
pub async fn push_image(host: &str, repo: &str, tag: &str, image: &TestImage) -> String {
    let built = image.build("amd64");
    let client = oci_client(host);
    push_built(&client, host, repo, tag, &built).await;
    let stored = client
        .fetch_manifest_digest(&oci_ref(host, repo, tag), &registry_auth(host))
        .await
        .unwrap_or_else(|e| panic!("fetch digest of {host}/{repo}:{tag}: {e}"));
    assert_eq!(
        stored, built.digest,
        "the registry stores {host}/{repo}:{tag} under another digest than the pushed bytes"
    );
    stored
}

/// Pushes a two-platform OCI image index as `<host>/<repo>:<tag>`: linux/amd64 is
/// `Healthy{version}` (runnable here), linux/arm64 a manifest whose config says arm64. Both
/// platform manifests are pushed by digest only (no tag). Returns
/// `(index_digest, amd64_manifest_digest)`.
pub async fn push_index(host: &str, repo: &str, tag: &str, version: &str) -> (String, String) {
    let client = oci_client(host);
    let image = TestImage::healthy(version);
    let amd64 = image.build("amd64");
    let arm64 = image.build("arm64");
    push_built(&client, host, repo, &amd64.digest, &amd64).await;
    push_built(&client, host, repo, &arm64.digest, &arm64).await;
    let entry = |img: &BuiltImage, arch: &str| {
        serde_json::json!({
            "mediaType": MT_OCI_MANIFEST,
            "digest": img.digest,
            "size": img.manifest.len(),
            "platform": { "architecture": arch, "os": "linux" },
        })
    };
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_INDEX,
        "manifests": [entry(&amd64, "amd64"), entry(&arm64, "arm64")],
    });
    let index = serde_json::to_vec(&index).expect("serialize index");
    let index_digest = sha256_digest(&index);
    client
        .push_manifest_raw(
            &oci_ref(host, repo, tag),
            index,
            reqwest::header::HeaderValue::from_static(MT_OCI_INDEX),
        )
        .await
        .unwrap_or_else(|e| panic!("push index {host}/{repo}:{tag}: {e}"));
    let stored = client
        .fetch_manifest_digest(&oci_ref(host, repo, tag), &registry_auth(host))
        .await
        .unwrap_or_else(|e| panic!("fetch digest of {host}/{repo}:{tag}: {e}"));
    assert_eq!(stored, index_digest, "index stored under another digest");
    (index_digest, amd64.digest)
}
