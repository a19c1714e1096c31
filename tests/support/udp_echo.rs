//! A UDP echo server for the test images: busybox's `nc` has no UDP mode here (and no
//! `udpsvd`), so a few lines of Rust, built once per test binary with the toolchain's own
//! `rustc` as a static executable that runs in a busybox-only image.

use super::*;

/// `udp-echo PORT`: answers every datagram on `0.0.0.0:PORT` with its own bytes.
const SOURCE: &str = r#"
use std::net::UdpSocket;
fn main() {
    let port = std::env::args().nth(1).expect("udp-echo PORT");
    let socket = UdpSocket::bind(format!("0.0.0.0:{port}")).expect("bind");
    let mut buf = [0u8; 2048];
    loop {
        if let Ok((n, from)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], from);
        }
    }
}
"#;

/// The static `udp-echo` executable's bytes.
pub fn udp_echo() -> &'static [u8] {
    static ECHO: OnceLock<Vec<u8>> = OnceLock::new();
    ECHO.get_or_init(|| {
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("udp-echo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the udp-echo build folder");
        let src = dir.join("udp_echo.rs");
        let out = dir.join("udp-echo");
        std::fs::write(&src, SOURCE).expect("write udp_echo.rs");
        let status = Command::new(rustc())
            .args([
                "-O",
                "-C",
                "target-feature=+crt-static",
                "-C",
                "panic=abort",
            ])
            .args(["-C", "strip=symbols", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run rustc for udp-echo");
        assert!(status.success(), "rustc could not build udp-echo");
        let bytes = std::fs::read(&out).expect("read udp-echo");
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
}

/// The `rustc` beside the `cargo` that runs the tests, else the one on `PATH`.
fn rustc() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .and_then(|cargo| Some(cargo.parent()?.join("rustc")))
        .filter(|r| r.is_file())
        .unwrap_or_else(|| PathBuf::from("rustc"))
}

/// Sends `payload` to `addr` over UDP until the same bytes come back, each try waiting a
/// second for them, for at most `within`: whether they came back.
pub fn udp_echo_answers(addr: SocketAddr, payload: &[u8], within: Duration) -> bool {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a UDP client");
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("UDP read timeout");
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        socket.send_to(payload, addr).expect("send a datagram");
        if let Ok((n, _)) = socket.recv_from(&mut buf)
            && &buf[..n] == payload
        {
            return true;
        }
    }
    false
}
