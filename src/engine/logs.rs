//! An app's output as the engine keeps it: a container's or a Swarm service's log, as
//! lines with their stream and time, read by a task of its own into a small bounded
//! channel. A reader that is slow (a browser on a bad link) fills the channel, and the task
//! then stops reading from the engine: the engine and the socket buffers hold the backlog,
//! never Pier's memory. A reader that goes away ends the task at once, even while the app
//! writes nothing.
//!
//! The lines go to the reader in batches: every line of the frames the engine's client
//! has ready when the task gets to it (up to [`BATCH`]), so that a busy log costs one
//! wake-up of the reader, and one write to its client, per read from the engine rather
//! than per line. Nothing waits to fill a batch: a quiet log's line goes out alone, at once.

use std::task::Poll;

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;

use super::deadline::Call;
use super::{Engine, EngineError, Result, err, status_of};

/// A line longer than this is cut (and marked): one endless line is no way to fill memory.
pub(crate) const MAX_LINE: usize = 16 * 1024;
/// Bytes kept of a line beyond [`MAX_LINE`] until its reader cuts it: room for the
/// engine's timestamp, and for masking a secret that the cut would split.
const SLACK: usize = 4096;
/// Lines read ahead of the reader at most: the batches in the channel, and the one the task
/// holds while it waits for room.
const AHEAD: usize = 32;
/// Lines sent to the reader at once at most (a frame that holds more goes whole).
const BATCH: usize = 16;
/// Batches the channel holds.
const QUEUED: usize = AHEAD / BATCH - 1;

/// Which of a container's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LogLine {
    pub stream: LogStream,
    /// When the engine received it (its own timestamp), always with nine digits of
    /// fraction, so that the text sorts as the time does.
    #[serde(serialize_with = "nanos")]
    pub at: Option<DateTime<Utc>>,
    pub text: String,
    /// The app wrote more of this line than is kept.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

fn nanos<S: serde::Serializer>(
    at: &Option<DateTime<Utc>>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match at {
        Some(t) => s.serialize_str(&at_text(t)),
        None => s.serialize_none(),
    }
}

/// A line's time as every reader gets it: RFC 3339, UTC, nine digits of fraction.
pub(crate) fn at_text(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

impl LogLine {
    /// Cuts the text at [`MAX_LINE`] bytes (on a character boundary) and marks it, if it is
    /// longer or was cut already. Readers call this after masking: a secret is masked
    /// whole before any cut can split it.
    pub(crate) fn cut_to_max(&mut self) {
        if self.text.len() > MAX_LINE || self.cut {
            let mut end = MAX_LINE.min(self.text.len());
            while !self.text.is_char_boundary(end) {
                end -= 1;
            }
            self.text.truncate(end);
            self.text.push_str(" … [line cut]");
            self.cut = true;
        }
    }
}

/// What to read: the last `tail` lines (of those since `since`), then, with `follow`, what
/// comes after as it comes.
#[derive(Debug, Clone)]
pub(crate) struct LogQuery {
    pub since: Option<DateTime<Utc>>,
    pub tail: usize,
    pub follow: bool,
}

/// Whose log: a container, or a Swarm service (every task's, through the manager).
#[derive(Debug, Clone)]
pub(crate) enum LogSource {
    Container(String),
    Service(String),
}

impl Engine {
    /// The log of `source`, as batches of lines (never empty, in order); one that is gone
    /// ends the stream with an error that says so. Read once (no `follow`), each answer of the engine has a read's deadline;
    /// followed, the log lasts as long as its reader wants it. Callers find the source
    /// first (an inspect or a list, within its own deadline), so a hung engine is found
    /// out before a follow starts.
    pub(crate) async fn logs(
        &self,
        source: &LogSource,
        q: &LogQuery,
    ) -> Result<impl Stream<Item = Result<Vec<LogLine>>> + Send + use<>> {
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
            // Whole seconds: the reader drops what is earlier within the second.
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
        let (tx, mut rx) = mpsc::channel(QUEUED);
        let pump = Pump {
            action,
            engine: self.name.to_string(),
            // Followed, a quiet app may write nothing for hours.
            deadline: (!q.follow).then(|| Call::Read.deadline()),
            tx,
        };
        tokio::spawn(pump.run(raw));
        Ok(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

/// Reads the engine's answer into the channel a batch at a time, until either side ends.
struct Pump {
    action: String,
    engine: String,
    /// How long the engine may take to send the next part of a log read once.
    deadline: Option<std::time::Duration>,
    tx: mpsc::Sender<Result<Vec<LogLine>>>,
}

type Frame = std::result::Result<LogOutput, bollard::errors::Error>;
type Raw = std::pin::Pin<Box<dyn Stream<Item = Frame> + Send>>;

impl Pump {
    async fn run(self, mut raw: Raw) {
        let mut lines = Lines::default();
        let mut batch = Vec::with_capacity(BATCH);
        let mut ended = false;
        while !ended {
            let next = tokio::select! {
                next = self.next(&mut raw) => next,
                // The reader went away: stop reading now, not at the app's next line.
                () = self.tx.closed() => return,
            };
            let mut frame = match next {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return self.fail(e, batch).await,
            };
            loop {
                if let Err(e) = self.take(frame, &mut lines, &mut batch) {
                    return self.fail(e, batch).await;
                }
                if batch.len() >= BATCH {
                    break;
                }
                // The engine's client hands the frames of one read over one at a time,
                // from a task of its own: let that task run, then take what it has, until
                // the batch is full or nothing more is there. Nothing waits for the app.
                tokio::task::yield_now().await;
                frame = match futures_util::poll!(raw.next()) {
                    Poll::Ready(Some(frame)) => frame,
                    Poll::Ready(None) => {
                        ended = true;
                        break;
                    }
                    Poll::Pending => break,
                };
            }
            if !batch.is_empty() && !self.send(&mut batch).await {
                return;
            }
        }
        lines.finish(&mut batch);
        if !batch.is_empty() {
            self.send(&mut batch).await;
        }
    }

    /// Adds the lines `frame` ends to `batch`.
    fn take(&self, frame: Frame, lines: &mut Lines, batch: &mut Vec<LogLine>) -> Result<()> {
        let (stream, bytes) = match frame {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                (LogStream::Stdout, message)
            }
            Ok(LogOutput::StdErr { message }) => (LogStream::Stderr, message),
            Ok(LogOutput::StdIn { .. }) => return Ok(()),
            Err(e) => return Err(self.classify(e)),
        };
        lines.push(stream, &bytes, batch);
        Ok(())
    }

    /// Sends the batch, leaving an empty one; whether the reader is still there.
    async fn send(&self, batch: &mut Vec<LogLine>) -> bool {
        let full = std::mem::replace(batch, Vec::with_capacity(BATCH));
        self.tx.send(Ok(full)).await.is_ok()
    }

    /// Sends what was read before the error, then the error.
    async fn fail(&self, e: EngineError, mut batch: Vec<LogLine>) {
        if batch.is_empty() || self.send(&mut batch).await {
            let _ = self.tx.send(Err(e)).await;
        }
    }

    /// The engine's next frame, within the deadline if there is one.
    async fn next(&self, raw: &mut Raw) -> Result<Option<Frame>> {
        match self.deadline {
            None => Ok(raw.next().await),
            Some(after) => {
                tokio::time::timeout(after, raw.next())
                    .await
                    .map_err(|_| EngineError::TimedOut {
                        engine: self.engine.clone(),
                        action: self.action.clone(),
                        after,
                    })
            }
        }
    }

    /// A failed read of the log, "gone" when the engine says it is.
    fn classify(&self, e: bollard::errors::Error) -> EngineError {
        match status_of(&e) {
            Some(404) => EngineError::Refused {
                action: self.action.clone(),
                message: "it is gone (removed), and its log with it".into(),
            },
            _ => err(&self.action, e),
        }
    }
}

/// Bytes to lines, per stream: a frame may end mid-line, and the rest comes in the next.
/// At most [`MAX_LINE`] and its slack are kept of a line, however long the app makes it.
#[derive(Default)]
struct Lines {
    partial: [Vec<u8>; 2],
    cut: [bool; 2],
}

/// Room for the engine's timestamp in front of a line, and the slack after it.
const HELD: usize = 40 + MAX_LINE + SLACK;

impl Lines {
    /// The lines `bytes` end, onto `out`.
    fn push(&mut self, stream: LogStream, bytes: &[u8], out: &mut Vec<LogLine>) {
        let i = stream as usize;
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
    }

    /// The lines the log ended in the middle of, onto `out`.
    fn finish(&mut self, out: &mut Vec<LogLine>) {
        for stream in [LogStream::Stdout, LogStream::Stderr] {
            let i = stream as usize;
            if !self.partial[i].is_empty() {
                let bytes = std::mem::take(&mut self.partial[i]);
                out.push(line(stream, &bytes, self.cut[i]));
            }
        }
    }
}

/// One line as the engine wrote it (`2026-12-05T01:02:03.123456789Z text`): its time and
/// its text (invalid UTF-8 replaced), not cut yet (see [`LogLine::cut_to_max`]).
fn line(stream: LogStream, bytes: &[u8], cut: bool) -> LogLine {
    let text = String::from_utf8_lossy(bytes);
    let (at, rest) = match text.split_once(' ') {
        Some((ts, rest)) => match DateTime::parse_from_rfc3339(ts) {
            Ok(t) => (Some(t.with_timezone(&Utc)), rest),
            Err(_) => (None, text.as_ref()),
        },
        None => (None, text.as_ref()),
    };
    LogLine {
        stream,
        at,
        text: rest.trim_end_matches('\r').to_owned(),
        cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `bytes` end.
    fn push(l: &mut Lines, stream: LogStream, bytes: &[u8]) -> Vec<LogLine> {
        let mut out = Vec::new();
        l.push(stream, bytes, &mut out);
        out
    }

    #[test]
    fn frames_become_lines_per_stream_with_their_time() {
        let mut l = Lines::default();
        let got = push(
            &mut l,
            LogStream::Stdout,
            b"2026-12-05T01:02:03.5Z hello\n2026-12-05T01:02:04Z wor",
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "hello");
        assert_eq!(
            serde_json::to_value(&got[0]).unwrap()["at"],
            "2026-12-05T01:02:03.500000000Z"
        );
        let err = push(&mut l, LogStream::Stderr, b"2026-12-05T01:02:05Z oops\n");
        assert_eq!(err[0].stream, LogStream::Stderr);
        let got = push(&mut l, LogStream::Stdout, b"ld\n");
        assert_eq!(got[0].text, "world");
        assert!(!got[0].cut);
        let mut rest = Vec::new();
        l.finish(&mut rest);
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn frames_there_at_once_reach_the_reader_in_batches_in_order() {
        let frames: Vec<Frame> = (0..40)
            .map(|i| {
                Ok(LogOutput::StdOut {
                    message: format!("2026-12-05T01:02:03Z {i}\n").into(),
                })
            })
            .collect();
        let (tx, mut rx) = mpsc::channel(QUEUED);
        let pump = Pump {
            action: "logs of container c".into(),
            engine: "local".into(),
            deadline: None,
            tx,
        };
        tokio::spawn(pump.run(futures_util::stream::iter(frames).boxed()));
        let (mut sizes, mut texts) = (Vec::new(), Vec::new());
        while let Some(batch) = rx.recv().await {
            let batch = batch.expect("lines");
            sizes.push(batch.len());
            texts.extend(batch.into_iter().map(|l| l.text));
        }
        assert_eq!(sizes, [BATCH, BATCH, 40 - 2 * BATCH]);
        let expected: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        assert_eq!(texts, expected);
    }

    #[test]
    fn an_endless_line_is_cut_and_memory_stays_bounded() {
        let mut l = Lines::default();
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..50 {
            assert!(push(&mut l, LogStream::Stdout, &chunk).is_empty());
            assert!(l.partial[0].len() <= HELD);
        }
        let mut got = push(&mut l, LogStream::Stdout, b"\nnext\n");
        assert_eq!(got.len(), 2);
        assert!(got[0].cut);
        got[0].cut_to_max();
        assert!(
            got[0].text.ends_with("[line cut]"),
            "{}",
            &got[0].text[..20]
        );
        assert!(got[0].text.len() <= MAX_LINE + 20);
        assert_eq!(got[1].text, "next");
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let mut line = LogLine {
            stream: LogStream::Stdout,
            at: None,
            text: "é".repeat(MAX_LINE),
            cut: false,
        };
        line.cut_to_max();
        assert!(line.cut);
        assert!(line.text.len() <= MAX_LINE + 20);
    }
}
