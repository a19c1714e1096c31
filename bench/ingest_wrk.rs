//! The ingest table's client: `wrk` (Debian's), as the issue measured with, sending
//! requests signed beforehand. A client costs the sender's side of every request, which the
//! `pgbench` floor does not pay; `wrk` (C, one event loop per thread) costs least of the
//! clients at hand, and it drives Pier and adnanh/webhook alike. Without `wrk` the table
//! falls back to the reqwest client in `drive`.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

/// Sends at most `rate_cap` requests per second of `dur`, never one twice: the requests are
/// signed here first, `make(n)` giving the n-th (url, body, signature), and each `wrk` thread
/// sends every `threads`-th of them. Answers other than `expect` are counted, not sent again.
/// Returns (answered `expect` per second, other answers), or `None` without `wrk`.
pub fn drive_wrk(
    conc: usize,
    dur: Duration,
    expect: u16,
    make: &(dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync),
    rate_cap: u64,
) -> Option<(f64, u64)> {
    Command::new("wrk").arg("--version").output().ok()?;
    let count = rate_cap * dur.as_secs().max(1);
    let dir = std::env::temp_dir().join(format!("pier-bench-wrk-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).ok()?;
    let data = dir.join("requests.txt");
    let mut lines = String::with_capacity(count as usize * 300);
    let mut url = String::new();
    for n in 0..count {
        let (u, body, sig) = make(n);
        url = u;
        // The bodies are one-line JSON: a line holds the signature, a space, the body.
        let body = String::from_utf8(body).expect("bench bodies are UTF-8");
        assert!(!body.contains('\n'));
        let _ = writeln!(lines, "{sig} {body}");
    }
    std::fs::write(&data, lines).ok()?;
    let script = dir.join("send.lua");
    std::fs::write(&script, LUA).ok()?;
    let threads = conc.min(2);
    let out = Command::new("wrk")
        .args(["-t", &threads.to_string(), "-c", &conc.to_string()])
        .args([
            "-d",
            &format!("{}s", dur.as_secs()),
            "--timeout",
            "10s",
            "-s",
        ])
        .arg(&script)
        .arg(&url)
        .arg("--")
        .arg(&data)
        .arg(threads.to_string())
        .arg(expect.to_string())
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let sent: f64 = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())?;
    let secs: f64 = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| {
            let t = l.split(" requests in ").nth(1)?.split(',').next()?;
            t.trim().trim_end_matches('s').parse().ok()
        })?;
    let other: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("OTHER "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let used = text
        .lines()
        .find_map(|l| l.strip_prefix("USED "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if used >= count {
        eprintln!("  wrk ran out of unique requests ({count}): raise the cap");
    }
    Some(((sent - other as f64) / secs, other))
}

/// Each thread loads every request and sends those with its own stride, so no two
/// connections send one delivery; `response` counts unexpected answers per thread.
const LUA: &str = r#"
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  local file, n, want = args[1], tonumber(args[2]), tonumber(args[3])
  stride, expect, other, used = n, want, 0, 0
  reqs = {}
  for line in io.lines(file) do
    local sig, body = line:match("^(%S+) (.*)$")
    reqs[#reqs + 1] = wrk.format("POST", nil,
      {["Content-Type"] = "application/json", ["X-Pier-Signature"] = sig}, body)
  end
  i = tid + 1
end
function request()
  local r = reqs[i]
  if r == nil then i = tid + 1; r = reqs[i] end
  i = i + stride
  used = used + 1
  return r
end
function response(status)
  if status ~= expect then other = other + 1 end
end
function done()
  local o, u = 0, 0
  for _, t in ipairs(threads) do
    o = o + t:get("other")
    u = u + t:get("used")
  end
  io.write(string.format("OTHER %d\nUSED %d\n", o, u))
end
"#;
