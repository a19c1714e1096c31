//! A TCP relay between a `pier` process and Postgres, as a fault injector and a counter:
//! it counts the statements the client sends (simple `Query` and extended-protocol
//! `Execute` messages) and its round trips (`Sync` and simple `Query` messages, each
//! answered by one `ReadyForQuery`; a ping is a `Sync` alone), and
//! it can freeze: connections stay open but no byte moves either
//! way, as when a network path stalls while both ends are alive.
//!
//! The client must not use TLS (`sslmode=disable`), or the relay could not read the
//! message types.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::*;

#[derive(Default)]
struct Shared {
    statements: AtomicU64,
    syncs: AtomicU64,
    frozen: AtomicBool,
    thawed: Notify,
}

pub struct PgProxy {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl PgProxy {
    /// Relays 127.0.0.1:<ephemeral> to the host and port of `database_url`.
    pub async fn start(database_url: &str) -> PgProxy {
        let url = reqwest::Url::parse(database_url).expect("database url");
        let upstream = format!(
            "{}:{}",
            url.host_str().expect("database host"),
            url.port().unwrap_or(5432)
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, s.clone()));
            }
        });
        PgProxy { shared, addr, task }
    }

    /// `database_url` with its host and port replaced by the relay's, TLS off.
    pub fn url_for(&self, database_url: &str) -> String {
        let mut url = reqwest::Url::parse(database_url).expect("database url");
        url.set_host(Some("127.0.0.1")).expect("host");
        url.set_port(Some(self.addr.port())).expect("port");
        url.query_pairs_mut().append_pair("sslmode", "disable");
        url.to_string()
    }

    /// Statements sent through the relay so far.
    pub fn statements(&self) -> u64 {
        self.shared.statements.load(Ordering::SeqCst)
    }

    /// Round trips the clients asked for so far: a simple query, an extended-protocol
    /// statement's `Sync`, or a ping's.
    pub fn round_trips(&self) -> u64 {
        self.shared.syncs.load(Ordering::SeqCst)
    }

    /// Stops every byte in both directions; connections stay open.
    pub fn freeze(&self) {
        self.shared.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.shared.frozen.store(false, Ordering::SeqCst);
        self.shared.thawed.notify_waiters();
    }
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(
        pump(cr, sw, shared.clone(), Some(MessageCounter::default())),
        pump(sr, cw, shared, None)
    );
}

/// Copies one direction, holding every chunk while frozen; counts the frontend's
/// statements when given a counter.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    mut counter: Option<MessageCounter>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        wait_thawed(&shared).await;
        if let Some(c) = counter.as_mut() {
            let (statements, syncs) = c.feed(&buf[..n]);
            shared.statements.fetch_add(statements, Ordering::SeqCst);
            shared.syncs.fetch_add(syncs, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

async fn wait_thawed(shared: &Shared) {
    loop {
        let thawed = shared.thawed.notified();
        if !shared.frozen.load(Ordering::SeqCst) {
            return;
        }
        thawed.await;
    }
}

/// Frames the frontend's byte stream into messages. The first messages of a connection
/// (SSLRequest, StartupMessage) have no type byte; every later one is a type byte and a
/// big-endian length that includes itself.
#[derive(Default)]
struct MessageCounter {
    started: bool,
    pending: Vec<u8>,
}

impl MessageCounter {
    /// Statements and round trips completed by these bytes.
    fn feed(&mut self, bytes: &[u8]) -> (u64, u64) {
        self.pending.extend_from_slice(bytes);
        let (mut found, mut syncs) = (0, 0);
        loop {
            if !self.started {
                if self.pending.len() < 8 {
                    return (found, syncs);
                }
                let len = u32::from_be_bytes(self.pending[0..4].try_into().unwrap()) as usize;
                let code = u32::from_be_bytes(self.pending[4..8].try_into().unwrap());
                if self.pending.len() < len {
                    return (found, syncs);
                }
                self.pending.drain(..len);
                // 80877103 asks for TLS and 80877104 for GSS encryption: the startup
                // message proper follows them.
                if code != 80_877_103 && code != 80_877_104 {
                    self.started = true;
                }
                continue;
            }
            if self.pending.len() < 5 {
                return (found, syncs);
            }
            let kind = self.pending[0];
            let len = u32::from_be_bytes(self.pending[1..5].try_into().unwrap()) as usize;
            if self.pending.len() < 1 + len {
                return (found, syncs);
            }
            if kind == b'Q' || kind == b'E' {
                found += 1;
            }
            if kind == b'S' || kind == b'Q' {
                syncs += 1;
            }
            self.pending.drain(..1 + len);
        }
    }
}
