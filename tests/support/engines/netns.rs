//! One network namespace per extra engine, joined to the host by a veth pair, each with
//! its own /29 of 10.199.0.0/16. A slot is claimed by creating its namespace: `ip netns
//! add` fails when the name exists, so two tests (or two test binaries) never share one.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::procs::{self, attempt, run};

/// Slots in 10.199.0.0/16: 8 addresses each.
const SLOTS: u32 = 8192;
/// Where each engine's directory lives; its name starts with the namespace's.
const DIR_PREFIX: &str = "pier-e";

pub struct Slot {
    pub netns: String,
    pub veth_host: String,
    veth_ns: String,
    /// The host's end of the veth.
    pub host_ip: Ipv4Addr,
    /// The engine's address, in its certificate.
    pub ns_ip: Ipv4Addr,
    /// A second address of the namespace, not in the certificate.
    pub alias_ip: Ipv4Addr,
}

impl Slot {
    /// Claims a free slot and sets up its namespace and veth pair.
    pub fn claim() -> Slot {
        for _ in 0..64 {
            let index = (uuid::Uuid::new_v4().as_u128() % SLOTS as u128) as u32;
            let base = u32::from(Ipv4Addr::new(10, 199, 0, 0)) + index * 8;
            let slot = Slot {
                netns: format!("{DIR_PREFIX}{index}"),
                veth_host: format!("pe{index}h"),
                veth_ns: format!("pe{index}n"),
                host_ip: Ipv4Addr::from(base + 1),
                ns_ip: Ipv4Addr::from(base + 2),
                alias_ip: Ipv4Addr::from(base + 3),
            };
            if !attempt(Command::new("ip").args(["netns", "add", &slot.netns])) {
                continue; // taken
            }
            if slot.address_in_use() {
                slot.release();
                continue;
            }
            slot.wire();
            return slot;
        }
        panic!("no free network namespace slot after 64 tries (`ip netns list`)");
    }

    /// Something else on the host already has an address of this /29.
    fn address_in_use(&self) -> bool {
        let out = Command::new("ip")
            .args([
                "-4",
                "-o",
                "addr",
                "show",
                "to",
                &format!("{}/29", self.host_ip),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        !out.trim().is_empty()
    }

    fn wire(&self) {
        let ns = self.netns.as_str();
        let ip = |args: &[&str]| run(Command::new("ip").args(args));
        let in_ns = |args: &[&str]| run(Command::new("ip").args(["-n", ns]).args(args));
        ip(&[
            "link",
            "add",
            &self.veth_host,
            "type",
            "veth",
            "peer",
            "name",
            &self.veth_ns,
        ]);
        ip(&["link", "set", &self.veth_ns, "netns", ns]);
        ip(&[
            "addr",
            "add",
            &format!("{}/29", self.host_ip),
            "dev",
            &self.veth_host,
        ]);
        ip(&["link", "set", &self.veth_host, "up"]);
        in_ns(&[
            "addr",
            "add",
            &format!("{}/29", self.ns_ip),
            "dev",
            &self.veth_ns,
        ]);
        in_ns(&[
            "addr",
            "add",
            &format!("{}/29", self.alias_ip),
            "dev",
            &self.veth_ns,
        ]);
        in_ns(&["link", "set", &self.veth_ns, "up"]);
        in_ns(&["link", "set", "lo", "up"]);
    }

    /// Deletes the namespace (its end of the veth goes with it) and the host's end, after
    /// killing whatever still runs in it.
    pub fn release(&self) {
        procs::kill_namespace_processes(&self.netns, Duration::from_secs(5));
        attempt(Command::new("ip").args(["netns", "del", &self.netns]));
        attempt(Command::new("ip").args(["link", "del", &self.veth_host]));
    }

    /// The prefix of this engine's directory under the temp dir.
    pub fn dir_prefix(&self) -> String {
        format!("{}-", self.netns)
    }
}

/// What a test process records in its engine's directory, so that a later run can clean
/// up after one that was killed before its `Drop` ran.
pub fn record_owner(dir: &Path, netns: &str) {
    let me = std::process::id();
    let started = procs::start_time(me).unwrap_or(0);
    std::fs::write(dir.join("owner"), format!("{me} {started} {netns}\n"))
        .expect("write the engine's owner file");
}

/// Records a process of the engine, for [`sweep_orphans`].
pub fn record_pid(dir: &Path, pid: u32) {
    use std::io::Write;
    let started = procs::start_time(pid).unwrap_or(0);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("pids"))
    {
        let _ = writeln!(f, "{pid} {started}");
    }
}

/// Cleans up the engines of test processes that died without cleaning up (SIGKILL, a
/// timeout): their processes by recorded pid and start time, their namespace, their
/// directory. Engines whose owner still runs are left alone.
pub fn sweep_orphans() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for dir in entries.flatten().map(|e| e.path()) {
        let is_ours = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(DIR_PREFIX));
        let Some((owner, started, netns)) = is_ours.then(|| read_owner(&dir)).flatten() else {
            continue;
        };
        if procs::alive(owner, started) {
            continue;
        }
        eprintln!(
            "test harness: cleaning up {} left by pid {owner}",
            dir.display()
        );
        stop_orphan(&dir);
        procs::kill_namespace_processes(&netns, Duration::from_secs(5));
        attempt(Command::new("ip").args(["netns", "del", &netns]));
        procs::unmount_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// An orphaned engine's containers first, while its dockerd still answers; then its
/// processes, given the time a stop takes before they are killed.
fn stop_orphan(dir: &Path) {
    let sock = dir.join("docker.sock");
    if sock.exists() {
        let host = format!("unix://{}", sock.display());
        let ids = Command::new("timeout")
            .args(["20", "docker", "-H", &host, "ps", "-aq"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if !ids.trim().is_empty() {
            attempt(
                Command::new("timeout")
                    .args(["30", "docker", "-H", &host, "rm", "-f", "-v"])
                    .args(ids.split_whitespace()),
            );
        }
    }
    let pids = read_pids(dir);
    let running = || pids.iter().filter(|&&(p, s)| procs::alive(p, s));
    running().for_each(|&(pid, _)| procs::signal(pid, "TERM"));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while running().next().is_some() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    running().for_each(|&(pid, _)| {
        procs::signal_group(pid, "KILL");
        procs::signal(pid, "KILL");
    });
}

fn read_owner(dir: &Path) -> Option<(u32, u64, String)> {
    let text = std::fs::read_to_string(dir.join("owner")).ok()?;
    let mut f = text.split_whitespace();
    Some((
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
        f.next()?.to_owned(),
    ))
}

fn read_pids(dir: &Path) -> Vec<(u32, u64)> {
    let path: PathBuf = dir.join("pids");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (p, s) = l.split_once(' ')?;
            Some((p.parse().ok()?, s.parse().ok()?))
        })
        .collect()
}
