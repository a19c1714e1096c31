//! The processes of an extra engine: started in their own process group (so that a
//! `socat … fork` is stopped with the connections it forked), stopped by pid with a
//! deadline, and recognised again by pid and start time (a pid alone may have been reused).

use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `nsenter --net=<netns> -- program`: a process in the namespace's network, everything
/// else (files, pids, cgroups) shared with the host. Not `ip netns exec`: it remounts
/// `/sys`, and a `dockerd` started under it finds no cgroups.
pub fn in_namespace(netns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/var/run/netns/{netns}"))
        .arg("--")
        .arg(program);
    cmd
}

/// Runs `cmd` to completion and panics with its output unless it succeeds.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

/// Runs `cmd` and says only whether it succeeded (for cleanup, where a step that finds
/// nothing to do is fine).
pub fn attempt(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `/proc/PID/stat`'s start time (field 22): with the pid, it names one process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `started` still exists (and is no zombie).
pub fn alive(pid: u32, started: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, a)| a.split_whitespace().next());
    start_time(pid) == Some(started) && state != Some("Z")
}

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Signals the whole process group led by `pid`.
pub fn signal_group(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{pid}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Who a stop signal goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The process alone: it stops its own children (dockerd stops containerd after the
    /// containers; signalling containerd at once would cut that short).
    Leader,
    /// Its whole process group (a `socat … fork` and the connections it forked).
    Group,
}

/// Stops a child: SIGTERM, up to `grace` for it to exit, then SIGKILL (to its group in
/// any case). Always reaps it.
pub fn stop_child(child: &mut Child, scope: Scope, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        signal_group(child.id(), "KILL");
        return;
    }
    match scope {
        Scope::Leader => signal(child.id(), "TERM"),
        Scope::Group => signal_group(child.id(), "TERM"),
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            // What the leader left of its group (forked connections) goes too.
            signal_group(child.id(), "KILL");
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    signal_group(child.id(), "KILL");
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether a process listens on `addr` (TCP) in the network namespace of `pid`: read from
/// `/proc/PID/net/tcp`, which shows that process's namespace, so no connection is made.
pub fn listening(pid: u32, addr: SocketAddrV4) -> bool {
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(addr.ip().octets()),
        addr.port()
    );
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).is_ok_and(|table| {
        table.lines().skip(1).any(|l| {
            let mut f = l.split_whitespace();
            let local = f.nth(1);
            let state = f.nth(1);
            local == Some(want.as_str()) && state == Some("0A")
        })
    })
}

/// Polls `ready` until it holds; panics with `what` and `log`'s tail after `timeout`, or
/// at once when `child` exits first.
pub async fn wait_ready(
    what: &str,
    child: &mut Child,
    log: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        if ready() {
            return;
        }
        let log_tail = || crate::support::tail(&crate::support::read_lossy(log), 30);
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before it was ready; {}:\n{}",
                log.display(),
                log_tail()
            );
        }
        if Instant::now() >= deadline {
            panic!(
                "{what} was not ready within {timeout:?}; {}:\n{}",
                log.display(),
                log_tail()
            );
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// The pids `ip netns pids` lists: every process whose network is that namespace.
pub fn namespace_pids(netns: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGKILLs every process left in `netns` and waits (bounded) until none is.
pub fn kill_namespace_processes(netns: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = namespace_pids(netns);
        if pids.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in pids {
            signal(pid, "KILL");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Lazily unmounts whatever is still mounted under `dir` (a dockerd that was killed
/// leaves its overlay and netns mounts), deepest first, so the directory can go.
pub fn unmount_under(dir: &Path) {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<&str> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        attempt(Command::new("umount").args(["-l", p]));
    }
}
