//! Reverse proxies in front of a test's own app: the real `pier proxy` binary (routing
//! `app.test` from its state file, its database URL a closed port on purpose), and
//! Debian's nginx set up as an ordinary reverse proxy, the baseline Pier is held to.

use super::*;

/// A running `pier proxy` routing `app.test` on `listen` to one upstream.
pub struct PierProxy {
    pub process: PierProcess,
    pub listen: SocketAddr,
    _dir: TempDir,
}

impl PierProxy {
    /// Starts it with `proxy_toml` added to `[proxy]`; returns once it accepts connections.
    pub async fn start(upstream: SocketAddr, proxy_toml: &str) -> PierProxy {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::start_on(upstream, listen, proxy_toml).await
    }

    /// The same on a given address (a second proxy beside a first, with `SO_REUSEPORT`).
    pub async fn start_on(upstream: SocketAddr, listen: SocketAddr, proxy_toml: &str) -> PierProxy {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let state = dir.path().join("routes.json");
        std::fs::write(
            &state,
            serde_json::json!([{
                "app": "echo", "version": 1, "upstream": upstream.to_string(),
                "container_id": "none",
                "deployment_id": "00000000-0000-0000-0000-000000000000",
                "standby": null,
            }])
            .to_string(),
        )
        .expect("write the state file");
        let toml = format!(
            r#"
[server]
database_url = "postgres://pier:pier@127.0.0.1:{closed}/none"
[proxy]
admin = "127.0.0.1:{admin}"
state_file = {state:?}
{proxy_toml}
[[apps]]
name = "echo"
image = "127.0.0.1:5000/proxy/echo"
port = 8080
strategy = "blue-green"
[apps.route]
listen = "{listen}"
hosts = ["app.test", "127.0.0.1"]
"#,
            closed = free_port(),
            admin = free_port(),
            state = state.display().to_string(),
        );
        let process = PierCommand::new(&toml)
            .args(["proxy"])
            .wait_healthy(false)
            .start()
            .await;
        let log = process.log_path();
        wait_until("pier proxy serves", Duration::from_secs(20), || {
            let log = log.clone();
            async move {
                read_lossy(&log)
                    .contains("pier proxy running")
                    .then_some(())
            }
        })
        .await;
        PierProxy {
            process,
            listen,
            _dir: dir,
        }
    }
}

/// nginx as a plain reverse proxy (HTTP/1.1 and keep-alive to the app, `Host` and
/// `X-Forwarded-For` set) on a loopback port; stopped, workers and all, on drop.
pub struct Nginx {
    child: Option<Child>,
    pub listen: SocketAddr,
    dir: TempDir,
}

impl Nginx {
    pub async fn start(upstream: SocketAddr) -> Nginx {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let d = dir.path().display();
        let conf = format!(
            r#"
user root;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    client_body_buffer_size 1m;
    upstream app {{ server {upstream}; keepalive 16; }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 10s;
        }}
    }}
}}
"#
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (scripts/test installs it)");
        let nginx = Nginx {
            child: Some(child),
            listen,
            dir,
        };
        wait_until("nginx listens", Duration::from_secs(20), || async move {
            tokio::net::TcpStream::connect(listen).await.ok().map(drop)
        })
        .await;
        nginx
    }

    pub fn error_log(&self) -> String {
        read_lossy(&self.dir.path().join("error.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Its workers are the master's children: SIGTERM is nginx's fast shutdown, which
        // ends them; whatever is left after the deadline is killed by pid.
        let workers = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .unwrap_or_default();
        send_sigterm(child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        for pid in workers.split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("nginx") {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
    }
}

/// Writes `request` on `s` and reads until the peer closes, within `deadline`: the whole
/// answer as text, or why there was none.
pub async fn exchange_to_close(
    mut s: tokio::net::TcpStream,
    request: &str,
    deadline: Duration,
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    tokio::time::timeout(deadline, s.read_to_end(&mut out))
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
