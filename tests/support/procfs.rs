//! What `/proc` says of a process and of the machine, for the memory tests and the
//! benches: resident memory, CPU time, the load average a figure was measured under.

/// The resident memory of process `pid` (`VmRSS` of `/proc/PID/status`), in bytes.
pub fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in /proc/PID/status")
        * 1024
}

/// User plus system CPU time of process `pid` (`utime` + `stime` of `/proc/PID/stat`), in
/// clock ticks (1/100 s); 0 for a process that is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name, in parentheses, may hold spaces: count the fields after it.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// The load average over 1, 5 and 15 minutes, as `/proc/loadavg` has it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
