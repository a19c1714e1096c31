//! Where a message body ends, found without decoding it: the bytes go through as they
//! came, and the proxy only needs to know when the next message begins. Also the byte
//! stream a connection is handed to hyper with, its already-read bytes first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Chunk extensions and trailers an answer may carry at most, in bytes.
const MAX_CHUNK_META: u32 = 16 * 1024;

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// After this many more bytes.
    Length(u64),
    /// At its last chunk and trailers.
    Chunked(Chunks),
    /// When the sender closes the connection.
    Close,
}

/// Where a chunked body's reader stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks {
    state: State,
    /// Extension and trailer bytes seen so far.
    meta: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size { value: u64, digits: u8 },
    Extension { value: u64 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    LineStart,
    Trailer,
    EndLf,
    Done,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the app's chunked body is malformed")]
pub struct BadChunk;

/// How much of a read belongs to the body, and whether the body is complete with it.
#[derive(Debug, PartialEq, Eq)]
pub struct Progress {
    pub used: usize,
    pub done: bool,
}

impl Framing {
    pub fn chunked() -> Framing {
        Framing::Chunked(Chunks {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            meta: 0,
        })
    }

    pub fn is_done(&self) -> bool {
        matches!(
            self,
            Framing::Length(0)
                | Framing::Chunked(Chunks {
                    state: State::Done,
                    ..
                })
        )
    }

    /// Accounts for `bytes`, the next bytes after what was seen so far.
    pub fn take(&mut self, bytes: &[u8]) -> Result<Progress, BadChunk> {
        match self {
            Framing::Length(rem) => {
                let used = (*rem).min(bytes.len() as u64);
                *rem -= used;
                Ok(Progress {
                    used: used as usize,
                    done: *rem == 0,
                })
            }
            Framing::Close => Ok(Progress {
                used: bytes.len(),
                done: false,
            }),
            Framing::Chunked(c) => c.take(bytes),
        }
    }
}

impl Chunks {
    fn take(&mut self, bytes: &[u8]) -> Result<Progress, BadChunk> {
        let mut i = 0;
        while i < bytes.len() && self.state != State::Done {
            if let State::Data(rem) = self.state {
                // Data is skipped in one step, not looked at byte by byte.
                let n = rem.min((bytes.len() - i) as u64);
                i += n as usize;
                self.state = if rem == n {
                    State::DataCr
                } else {
                    State::Data(rem - n)
                };
                continue;
            }
            self.state = self.step(bytes[i])?;
            i += 1;
        }
        Ok(Progress {
            used: i,
            done: self.state == State::Done,
        })
    }

    fn step(&mut self, b: u8) -> Result<State, BadChunk> {
        let meta = |c: &mut Chunks, next: State| {
            c.meta += 1;
            if c.meta > MAX_CHUNK_META {
                Err(BadChunk)
            } else {
                Ok(next)
            }
        };
        match (self.state, b) {
            (State::Size { value, digits }, _) if b.is_ascii_hexdigit() => {
                if digits >= 15 {
                    return Err(BadChunk);
                }
                let d = (b as char).to_digit(16).expect("a hex digit") as u64;
                Ok(State::Size {
                    value: value * 16 + d,
                    digits: digits + 1,
                })
            }
            (State::Size { value, digits }, b';' | b' ' | b'\t') if digits > 0 => {
                meta(self, State::Extension { value })
            }
            (State::Size { value, digits }, b'\r') if digits > 0 => Ok(State::SizeLf { value }),
            (State::Extension { value }, b'\r') => Ok(State::SizeLf { value }),
            (State::Extension { value }, _) => meta(self, State::Extension { value }),
            (State::SizeLf { value: 0 }, b'\n') => Ok(State::LineStart),
            (State::SizeLf { value }, b'\n') => Ok(State::Data(value)),
            (State::DataCr, b'\r') => Ok(State::DataLf),
            (State::DataLf, b'\n') => Ok(State::Size {
                value: 0,
                digits: 0,
            }),
            (State::LineStart, b'\r') => Ok(State::EndLf),
            (State::LineStart | State::Trailer, b'\n') => meta(self, State::LineStart),
            (State::LineStart | State::Trailer, _) => meta(self, State::Trailer),
            (State::EndLf, b'\n') => Ok(State::Done),
            _ => Err(BadChunk),
        }
    }
}

/// A connection handed over with the bytes already read from it, which are read first.
pub struct Prefixed<IO> {
    prefix: Bytes,
    io: IO,
}

impl<IO> Prefixed<IO> {
    pub(crate) fn new(prefix: Bytes, io: IO) -> Self {
        Prefixed { prefix, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` in pieces of `step` bytes; the bytes used and whether it ended.
    fn feed(body: &[u8], step: usize) -> Result<(usize, bool), BadChunk> {
        let mut f = Framing::chunked();
        let mut used = 0;
        for piece in body.chunks(step) {
            let p = f.take(piece)?;
            used += p.used;
            if p.done {
                assert!(f.is_done());
                return Ok((used, true));
            }
            assert_eq!(p.used, piece.len());
        }
        Ok((used, false))
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers_in_any_pieces() {
        let body =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        let whole = body.len() - 4;
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(feed(body, step), Ok((whole, true)), "step {step}");
        }
        assert_eq!(feed(b"0\r\n\r\n", 1), Ok((5, true)));
        assert_eq!(feed(b"5\r\nhel", 100), Ok((6, false)));
    }

    #[test]
    fn a_malformed_chunked_body_is_refused() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\rhello",
            b"1234567890abcdef0\r\n",
        ] {
            assert_eq!(feed(bad, 100), Err(BadChunk), "{bad:?}");
        }
        let long_trailer = format!("0\r\nX: {}\r\n\r\n", "a".repeat(MAX_CHUNK_META as usize));
        assert_eq!(feed(long_trailer.as_bytes(), 4096), Err(BadChunk));
    }

    #[test]
    fn a_length_ends_after_its_bytes_and_close_never_does() {
        let mut f = Framing::Length(5);
        assert_eq!(
            f.take(b"abc").unwrap(),
            Progress {
                used: 3,
                done: false
            }
        );
        assert_eq!(
            f.take(b"defgh").unwrap(),
            Progress {
                used: 2,
                done: true
            }
        );
        let mut c = Framing::Close;
        assert_eq!(
            c.take(b"abc").unwrap(),
            Progress {
                used: 3,
                done: false
            }
        );
        assert!(!c.is_done());
    }
}
