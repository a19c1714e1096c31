//! A load inside an extra engine's namespace, as a client on that host: `curl` GETting the
//! app through that host's `pier proxy`, one line per answer, for zero-downtime checks.

use std::process::Stdio;
use std::time::Duration;

use super::ExtraEngine;

impl ExtraEngine {
    /// `GET path` through the proxy inside the namespace, as a client on that host sends it
    /// (`curl`: HTTP/1.1, the connection kept open until the answer is in; the harness's
    /// `http_get_inside` half-closes after its request, and the proxy drops a client that
    /// goes away): `Some((status, body))`, `None` without an answer within 5 s.
    pub async fn curl_inside(&self, port: u16, path: &str) -> Option<(u16, String)> {
        let mut cmd = tokio::process::Command::from(self.command("curl"));
        cmd.args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(8), cmd.output())
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n')?;
        Some((
            status.trim().parse().ok().filter(|s| *s > 0)?,
            body.to_owned(),
        ))
    }

    /// `GET /version` on this host's `127.0.0.1:port`, back to back until finished.
    pub fn load_inside(&self, port: u16) -> LoadInside {
        LoadInside::start(self, port)
    }
}

/// `curl` inside the namespace GETting `url` back to back (one connection, kept alive)
/// until killed, one line per answer: the body, then the status (`000`: no answer).
pub struct LoadInside {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl LoadInside {
    fn start(remote: &ExtraEngine, port: u16) -> LoadInside {
        let out = remote.dir().join(format!("load-{port}.txt"));
        let file = std::fs::File::create(&out).unwrap();
        let child = remote
            .command("stdbuf")
            .args([
                "-oL",
                "curl",
                "-s",
                "--max-time",
                "10",
                "-w",
                " %{http_code}\\n",
            ])
            .arg(format!("http://127.0.0.1:{port}/version?n=[1-400000]"))
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("curl inside the namespace");
        LoadInside { child, out }
    }

    /// The answers so far, complete lines only.
    pub fn answers(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
        complete.lines().map(str::to_owned).collect()
    }

    pub fn finish(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.answers()
    }
}
