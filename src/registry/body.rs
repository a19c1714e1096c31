//! Reading an answer's body from a registry: never more than a cap in memory, never past
//! the answer's deadline. A body is refused as soon as it is known to be too large (its
//! `Content-Length`, or the chunk that would cross the cap), before it is copied.

use bytes::Bytes;
use tokio::time::Instant;

/// The body is larger than the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

/// Collects a body of at most `limit` bytes.
#[derive(Debug)]
pub(crate) struct Capped {
    buf: Vec<u8>,
    limit: usize,
}

impl Capped {
    /// Refuses at once a body whose announced length is over the cap. The buffer is sized
    /// by the announcement only up to the cap, so a lie costs at most the cap.
    pub(crate) fn new(limit: usize, announced: Option<u64>) -> Result<Self, TooLarge> {
        let announced = announced.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        if announced.is_some_and(|n| n > limit) {
            return Err(TooLarge);
        }
        Ok(Self {
            buf: Vec::with_capacity(announced.unwrap_or(0).min(limit)),
            limit,
        })
    }

    /// Appends `chunk`, or refuses it (without copying) if it would cross the cap.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), TooLarge> {
        if chunk.len() > self.limit - self.buf.len() {
            return Err(TooLarge);
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        Bytes::from(self.buf)
    }
}

#[derive(Debug)]
pub(crate) enum ReadError {
    TooLarge,
    /// The deadline passed with this many bytes read.
    Deadline(usize),
    Http(reqwest::Error),
}

/// Reads `resp`'s body, at most `limit` bytes, all of it before `deadline`. Dropping the
/// response on an error closes its connection, so the rest of a huge body is never read.
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    limit: usize,
    deadline: Instant,
) -> Result<Bytes, ReadError> {
    let mut body = Capped::new(limit, resp.content_length()).map_err(|_| ReadError::TooLarge)?;
    loop {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Err(_) => return Err(ReadError::Deadline(body.len())),
            Ok(Err(e)) => return Err(ReadError::Http(e)),
            Ok(Ok(None)) => return Ok(body.into_bytes()),
            Ok(Ok(Some(chunk))) => body.push(&chunk).map_err(|_| ReadError::TooLarge)?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_size_over_the_cap_is_refused_before_reading() {
        assert_eq!(Capped::new(10, Some(11)).unwrap_err(), TooLarge);
        assert_eq!(Capped::new(10, Some(u64::MAX)).unwrap_err(), TooLarge);
        assert!(Capped::new(10, Some(10)).is_ok());
    }

    #[test]
    fn a_body_may_reach_the_cap_but_not_cross_it() {
        let mut c = Capped::new(10, None).unwrap();
        c.push(b"12345").unwrap();
        c.push(b"67890").unwrap();
        assert_eq!(c.push(b"x"), Err(TooLarge));
        assert_eq!(c.len(), 10, "the refused chunk was not copied");
        assert_eq!(&c.into_bytes()[..], b"1234567890");

        let mut c = Capped::new(10, None).unwrap();
        c.push(b"123").unwrap();
        assert_eq!(c.push(&[0; 8]), Err(TooLarge));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_lying_announcement_costs_at_most_the_cap() {
        let c = Capped::new(1 << 20, Some(1 << 20)).unwrap();
        assert!(c.buf.capacity() <= 1 << 20);
        let mut c = Capped::new(8, Some(2)).unwrap();
        // Announced 2, sends more: still bounded by the cap, not the announcement.
        c.push(b"12345678").unwrap();
        assert_eq!(c.push(b"9"), Err(TooLarge));
    }
}
