//! An app's output as the engine keeps it: a container's or a Swarm service's log, as
//! lines with their stream and time, read by a task of its own into a small bounded
//! channel. A reader that is slow (a browser on a bad link) fills the channel, and the task
//! then stops reading from the engine: the engine and the TCP window hold the backlog,
//! never Pier's memory. A reader that goes away ends the task.

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;

use super::deadline::Call;
use super::{Engine, EngineError, Result, err, status_of};

/// A line longer than this is cut (and marked): one endless line is no way to fill memory.
pub const MAX_LINE: usize = 16 * 1024;
/// Lines read ahead of the reader at most.
const AHEAD: usize = 64;

/// Which of a container's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub stream: LogStream,
    /// When the engine received it (its own timestamp).
    pub at: Option<DateTime<Utc>>,
    pub text: String,
}

/// What to read: the last `tail` lines (of those since `since`), then, with `follow`, what
/// comes after as it comes.
#[derive(Debug, Clone)]
pub struct LogQuery {
    pub since: Option<DateTime<Utc>>,
    pub tail: usize,
    pub follow: bool,
}

/// Whose log: a container, or a Swarm service (every task's, through the manager).
#[derive(Debug, Clone)]
pub enum LogSource {
    Container(String),
    Service(String),
}

impl Engine {
    /// The log of `source`, as lines; one that is gone ends the stream with an error that
    /// says so. Without `follow` the whole read has a read's deadline; callers find the
    /// source first (an inspect, within its own deadline), so a hung engine is found out
    /// before a follow starts.
    pub(crate) async fn logs(
        &self,
        source: &LogSource,
        q: &LogQuery,
    ) -> Result<impl Stream<Item = Result<LogLine>> + Send + use<>> {
        let action = match source {
            LogSource::Container(id) => format!("logs of container {id}"),
            LogSource::Service(name) => format!("logs of service {name}"),
        };
        let mut options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .follow(q.follow)
            .tail(&q.tail.to_string());
        if let Some(since) = q.since {
            options = options.since(i32::try_from(since.timestamp()).unwrap_or(i32::MAX));
        }
        let options = options.build();
        let source = source.clone();
        let raw = self
            .call(Call::Probe, &action, async |d| {
                let d = d.clone();
                Ok(match source {
                    LogSource::Container(id) => d.logs(&id, Some(options)).boxed(),
                    LogSource::Service(name) => d.service_logs(&name, Some(options)).boxed(),
                })
            })
            .await?;
        let (tx, rx) = mpsc::channel(AHEAD);
        let (deadline, follow) = (Call::Read.deadline(), q.follow);
        let engine = self.name.clone();
        tokio::spawn(async move {
            let read = pump(raw, Lines::default(), tx, action.clone());
            // Followed, the log lasts as long as its reader wants it; read once, it is a
            // read like any other.
            if follow {
                read.await;
            } else if tokio::time::timeout(deadline, read).await.is_err() {
                tracing::debug!(%engine, %action, "log read cut at its deadline");
            }
        });
        Ok(tokio_stream_of(rx))
    }
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Reads `raw` into `tx` line by line, until either side ends.
async fn pump(
    mut raw: impl Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Unpin,
    mut lines: Lines,
    tx: mpsc::Sender<Result<LogLine>>,
    action: String,
) {
    while let Some(chunk) = raw.next().await {
        let (stream, bytes) = match chunk {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                (LogStream::Stdout, message)
            }
            Ok(LogOutput::StdErr { message }) => (LogStream::Stderr, message),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                let gone = status_of(&e) == Some(404);
                let e = if gone {
                    EngineError::Refused {
                        action,
                        message: "it is gone (removed), and its log with it".into(),
                    }
                } else {
                    err(&action, e)
                };
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        for line in lines.push(stream, &bytes) {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
    }
    for line in lines.finish() {
        if tx.send(Ok(line)).await.is_err() {
            return;
        }
    }
}

/// Bytes to lines, per stream: a frame may end mid-line, and the rest comes in the next.
#[derive(Default)]
struct Lines {
    partial: [Vec<u8>; 2],
    cut: [bool; 2],
}

impl Lines {
    fn push(&mut self, stream: LogStream, bytes: &[u8]) -> Vec<LogLine> {
        // Room for the engine's timestamp in front of a line of MAX_LINE bytes.
        const HELD: usize = MAX_LINE + 40;
        let i = stream as usize;
        let mut out = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let ends = piece.ends_with(b"\n");
            let body = piece.strip_suffix(b"\n").unwrap_or(piece);
            let take = body.len().min(HELD.saturating_sub(self.partial[i].len()));
            self.partial[i].extend_from_slice(&body[..take]);
            self.cut[i] |= take < body.len();
            if ends {
                let bytes = std::mem::take(&mut self.partial[i]);
                out.push(line(stream, &bytes, std::mem::take(&mut self.cut[i])));
            }
        }
        out
    }

    fn finish(&mut self) -> Vec<LogLine> {
        let mut out = Vec::new();
        for stream in [LogStream::Stdout, LogStream::Stderr] {
            let i = stream as usize;
            if !self.partial[i].is_empty() {
                let bytes = std::mem::take(&mut self.partial[i]);
                out.push(line(stream, &bytes, self.cut[i]));
            }
        }
        out
    }
}

/// One line as the engine wrote it (`2026-12-05T01:02:03.123456789Z text`): its time, and
/// its text cut at [`MAX_LINE`] bytes on a character boundary.
fn line(stream: LogStream, bytes: &[u8], cut: bool) -> LogLine {
    let text = String::from_utf8_lossy(bytes);
    let (at, rest) = match text.split_once(' ') {
        Some((ts, rest)) => match DateTime::parse_from_rfc3339(ts) {
            Ok(t) => (Some(t.with_timezone(&Utc)), rest),
            Err(_) => (None, text.as_ref()),
        },
        None => (None, text.as_ref()),
    };
    let mut text = rest.trim_end_matches('\r').to_owned();
    if text.len() > MAX_LINE || cut {
        let mut end = MAX_LINE.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" … [line cut]");
    }
    LogLine { stream, at, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_lines_per_stream_with_their_time() {
        let mut l = Lines::default();
        let got = l.push(
            LogStream::Stdout,
            b"2026-12-05T01:02:03.5Z hello\n2026-12-05T01:02:04Z wor",
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "hello");
        assert_eq!(got[0].at.unwrap().to_rfc3339(), "2026-12-05T01:02:03.500+00:00");
        assert!(l.push(LogStream::Stderr, b"2026-12-05T01:02:05Z oops\n")[0].stream == LogStream::Stderr);
        let got = l.push(LogStream::Stdout, b"ld\n");
        assert_eq!(got[0].text, "world");
        assert!(l.finish().is_empty());
    }

    #[test]
    fn an_endless_line_is_cut_and_memory_stays_bounded() {
        let mut l = Lines::default();
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..50 {
            assert!(l.push(LogStream::Stdout, &chunk).is_empty());
            assert!(l.partial[0].len() <= MAX_LINE + 40);
        }
        let got = l.push(LogStream::Stdout, b"\nnext\n");
        assert_eq!(got.len(), 2);
        assert!(got[0].text.ends_with("[line cut]"), "{}", &got[0].text[..20]);
        assert!(got[0].text.len() <= MAX_LINE + 20);
        assert_eq!(got[1].text, "next");
    }
}
