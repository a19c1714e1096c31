//! The proxy's listening sockets, shared with `SO_REUSEPORT`: a new `pier proxy` (an
//! upgrade, a restart) binds the same addresses beside the old one, the kernel spreads new
//! connections over both, and the old one, on SIGTERM, stops accepting without resetting
//! a connection it already has.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Connections waiting to be accepted, per listener.
const BACKLOG: u32 = 1024;

pub(crate) fn bind_shared(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Closes `listener` after taking every connection already in its queue: those are the
/// kernel's promise to clients, and closing a listener resets the ones it still holds.
/// From here on the kernel gives new connections to the other listeners on the address.
pub(crate) fn close_taking_backlog(listener: TcpListener) -> Vec<(TcpStream, SocketAddr)> {
    let Ok(std) = listener.into_std() else {
        return Vec::new();
    };
    let mut taken = Vec::new();
    // Bounded by the backlog: nothing is accepted after the queue was once found empty.
    while taken.len() <= BACKLOG as usize {
        match std.accept() {
            Ok((s, peer)) => {
                if s.set_nonblocking(true).is_ok()
                    && let Ok(s) = TcpStream::from_std(s)
                {
                    taken.push((s, peer));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    drop(std);
    taken
}
