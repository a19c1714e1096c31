//! A real Distribution registry process per test.

use super::*;

// ---------------------------------------------------------------------------------------------
// Distribution registry
// ---------------------------------------------------------------------------------------------

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A `docker-registry serve` (CNCF Distribution 2.8) on a loopback port, storing in a tempdir,
/// optionally sending its notifications to `notify_url` with `Authorization: Bearer <token>`.
/// Killed on `Drop`.
pub struct Registry {
    dir: Option<TempDir>,
    port: u16,
    child: Option<Child>,
}

impl Registry {
    pub async fn start(notify_url: Option<&str>, token: &str) -> Registry {
        Self::start_on(free_port(), notify_url, token).await
    }

    /// Like [`Registry::start`] on a port chosen in advance (e.g. written into a pier.toml).
    pub async fn start_on(port: u16, notify_url: Option<&str>, token: &str) -> Registry {
        Self::start_full(port, notify_url, token, None).await
    }

    /// Like [`Registry::start_on`]; with `auth`, the registry demands HTTP basic auth
    /// (htpasswd) and the harness's own pushes and lookups send those credentials.
    pub async fn start_full(
        port: u16,
        notify_url: Option<&str>,
        token: &str,
        auth: Option<(String, String)>,
    ) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("pier-registry-")
            .tempdir()
            .expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("create registry storage dir");
        let mut yml = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  formatter: text\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n  \
             maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: {secret}\n",
            data = data.display(),
            secret = random_hex(32),
        );
        if let Some((user, password)) = &auth {
            let hash = bcrypt::hash(password, 5).expect("bcrypt");
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("write htpasswd");
            yml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: pier-test\n    path: {}\n",
                htpasswd.display()
            ));
            set_registry_auth(&format!("127.0.0.1:{port}"), user, password);
        }
        if let Some(url) = notify_url {
            yml.push_str(&format!(
                "notifications:\n  endpoints:\n    - name: pier\n      url: {url}\n      \
                 headers:\n        Authorization: [\"Bearer {token}\"]\n      timeout: 2s\n      \
                 threshold: 3\n      backoff: 1s\n"
            ));
        }
        std::fs::write(dir.path().join("config.yml"), yml).expect("write registry config.yml");
        let mut reg = Registry {
            dir: Some(dir),
            port,
            child: None,
        };
        reg.spawn().await;
        reg
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("registry dir").path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("registry.log")
    }

    pub fn log(&self) -> String {
        read_lossy(&self.log_path())
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir().join("config.yml")
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "registry already running");
        let (out, err) = open_log(&self.log_path());
        let mut child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(self.config_path())
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {REGISTRY_BIN}: {e}"));
        let url = format!("{}/v2/", self.url());
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some((200 | 401, _)) = http_get(&url).await {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "docker-registry exited ({status}) before answering {url}; log {}:\n{}",
                    self.log_path().display(),
                    tail(&self.log(), 30)
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "docker-registry did not answer {url} within 15s; log {}:\n{}",
                    self.log_path().display(),
                    tail(&self.log(), 30)
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        self.child = Some(child);
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`: the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn is_running(&mut self) -> bool {
        child_alive(&mut self.child)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kills the registry (SIGKILL). Its storage stays; pending notifications are lost, as in
    /// a real crash.
    pub fn stop(&mut self) {
        kill_child(&mut self.child);
    }

    /// Starts the registry again on the same port with the same storage and config.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// Pushes `image` as `<host>/<repo>:<tag>`; returns the manifest digest the registry
    /// stores (checked against its `Docker-Content-Digest`).
    pub async fn push(&self, repo: &str, tag: &str, image: &TestImage) -> String {
        push_image(&self.host(), repo, tag, image).await
    }

    /// Pushes a two-platform OCI index under `tag`; see [`push_index`].
    pub async fn push_index(&self, repo: &str, tag: &str, version: &str) -> (String, String) {
        push_index(&self.host(), repo, tag, version).await
    }

    /// `HEAD /v2/<repo>/manifests/<reference>` with the OCI and Docker manifest media types
    /// accepted: `Some((digest, content_type))`, or `None` when absent.
    pub async fn head_manifest(&self, repo: &str, reference: &str) -> Option<(String, String)> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.url());
        let resp = http_client()
            .head(&url)
            .timeout(Duration::from_secs(5))
            .header("Accept", MANIFEST_ACCEPT)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let h = resp.headers();
        let digest = h.get("docker-content-digest")?.to_str().ok()?.to_owned();
        let ct = h
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Some((digest, ct))
    }

    /// Points `tag` at the manifest `digest` already in `repo`: one PUT of its bytes, no
    /// image built and no blob sent, so a tag moves at the moment a test says.
    pub async fn retag(&self, repo: &str, digest: &str, tag: &str) {
        let get = format!("{}/v2/{repo}/manifests/{digest}", self.url());
        let resp = http_client()
            .get(&get)
            .timeout(Duration::from_secs(10))
            .header("Accept", MANIFEST_ACCEPT)
            .send()
            .await
            .expect("GET the manifest");
        assert!(resp.status().is_success(), "GET {get}: {}", resp.status());
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or(MT_OCI_MANIFEST)
            .to_owned();
        let body = resp.bytes().await.expect("the manifest's bytes");
        let put = format!("{}/v2/{repo}/manifests/{tag}", self.url());
        let resp = http_client()
            .put(&put)
            .timeout(Duration::from_secs(10))
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .expect("PUT the manifest under the tag");
        assert!(resp.status().is_success(), "PUT {put}: {}", resp.status());
    }

    /// Deletes a manifest by digest (storage.delete is enabled).
    pub async fn delete_manifest(&self, repo: &str, digest: &str) -> u16 {
        let url = format!("{}/v2/{repo}/manifests/{digest}", self.url());
        http_client()
            .delete(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    }
}

impl Registry {
    /// Removes from the local engine every image reference into this registry: a registry
    /// lives for one test, and a whole run pulls about a thousand images. By reference,
    /// never by image id: another test's registry may hold the same bytes (the same test
    /// image), and removing the id would take its image away mid-deployment.
    fn remove_pulled_images(&self) {
        let host = format!("{}/", self.host());
        let format = "{{.Repository}} {{.Tag}} {{.Digest}}";
        let (ok, out) = docker_cli(&["images", "--digests", "--format", format]);
        if !ok {
            return;
        }
        let mut refs = Vec::new();
        for line in out.lines() {
            let mut f = line.split(' ');
            let (Some(repo), Some(tag), Some(digest)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if !repo.starts_with(&host) {
                continue;
            }
            if tag != "<none>" {
                refs.push(format!("{repo}:{tag}"));
            }
            if digest != "<none>" {
                refs.push(format!("{repo}@{digest}"));
            }
        }
        refs.sort_unstable();
        refs.dedup();
        if !refs.is_empty() {
            let mut args = vec!["rmi", "--force"];
            args.extend(refs.iter().map(String::as_str));
            let _ = docker_cli(&args);
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // While this registry still holds its port: once it is released, another test's
        // registry (or the demo's) may take it, and removing `127.0.0.1:<port>/…` would
        // then take that one's images away mid-deployment ("No such image" at create).
        self.remove_pulled_images();
        self.stop();
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            let log = kept.join("registry.log");
            eprintln!(
                "test harness: registry log kept at {}; tail:\n{}",
                log.display(),
                tail(&read_lossy(&log), 20)
            );
        }
    }
}
