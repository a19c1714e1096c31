//! Server-sent events as a browser reads them: the live pages' streams.

use super::*;

#[derive(Debug)]
pub struct SseEvent {
    pub name: String,
    pub data: String,
}

/// Reads server-sent events from `url` until the stream ends or `deadline` passes.
pub async fn read_events(url: &str, deadline: Duration) -> (Vec<SseEvent>, bool) {
    read_events_until(url, deadline, |_| false).await
}

/// Reads server-sent events from `url` until one satisfies `enough`, the stream ends or
/// `deadline` passes; `true` when the stream ended or `enough` was met.
pub async fn read_events_until(
    url: &str,
    deadline: Duration,
    mut enough: impl FnMut(&SseEvent) -> bool,
) -> (Vec<SseEvent>, bool) {
    let until = tokio::time::Instant::now() + deadline;
    let mut stream = EventStream::open(url).await;
    let mut events = Vec::new();
    loop {
        match stream.next_before(until).await {
            Next::Event(event) => {
                let met = enough(&event);
                events.push(event);
                if met {
                    return (events, true);
                }
            }
            Next::Ended => return (events, true),
            Next::TimedOut => return (events, false),
        }
    }
}

/// What [`EventStream::next_before`] found.
#[derive(Debug)]
pub enum Next {
    Event(SseEvent),
    Ended,
    TimedOut,
}

/// One open event stream, read an event at a time: a test can open it, see its first
/// frame (the stream listens from then on), cause a change, and read what follows.
pub struct EventStream {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl EventStream {
    /// Opens `url`; panics unless it answers 200 with `text/event-stream`.
    pub async fn open(url: &str) -> EventStream {
        Self::open_as(url, None).await
    }

    /// Opens `url` with a session's `Cookie` header (`name=value`), as a signed-in
    /// browser does; panics unless it answers 200 with `text/event-stream`.
    pub async fn open_as(url: &str, cookie: Option<&str>) -> EventStream {
        let mut req = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(url);
        if let Some(c) = cookie {
            req = req.header(reqwest::header::COOKIE, c);
        }
        let resp = req.send().await.expect("the stream answers");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        EventStream {
            body: Box::pin(resp.bytes_stream()),
            buf: String::new(),
        }
    }

    /// The next event with data (keep-alive comments skipped), unless the stream ends or
    /// `until` passes first.
    pub async fn next_before(&mut self, until: tokio::time::Instant) -> Next {
        loop {
            while let Some(at) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..at + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Next::Event(event);
                }
            }
            match tokio::time::timeout_at(until, self.body.next()).await {
                Err(_) => return Next::TimedOut,
                Ok(None) | Ok(Some(Err(_))) => return Next::Ended,
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
            }
        }
    }
}

/// One event's block (`event:` and `data:` lines); `None` for a comment alone.
fn parse_block(block: &str) -> Option<SseEvent> {
    let mut name = String::from("message");
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            data.push(d);
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d);
        }
    }
    (!data.is_empty()).then(|| SseEvent {
        name,
        data: data.join("\n"),
    })
}

/// Follows `url` as a browser's `EventSource` does, until a `final` event: a stream that
/// ends, or an answer that is not 200 (the database away), is opened again a second later.
/// Returns every event seen and how many times the stream was opened; panics at `deadline`.
pub async fn follow_until_final(url: &str, deadline: Duration) -> (Vec<SseEvent>, usize) {
    let until = Instant::now() + deadline;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut events = Vec::new();
    let mut opened = 0;
    while Instant::now() < until {
        opened += 1;
        let resp = client
            .get(url)
            .timeout(until.saturating_duration_since(Instant::now()))
            .send()
            .await;
        if let Ok(resp) = resp
            && resp.status() == 200
        {
            let mut body = resp.bytes_stream();
            let mut buf = String::new();
            while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(until.into(), body.next()).await
            {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(at) = buf.find("\n\n") {
                    let block: String = buf.drain(..at + 2).collect();
                    let name = block
                        .lines()
                        .find_map(|l| l.strip_prefix("event: "))
                        .unwrap_or("message")
                        .to_owned();
                    let data: Vec<&str> = block
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .collect();
                    if data.is_empty() {
                        continue;
                    }
                    let last = name == "final";
                    events.push(SseEvent {
                        name,
                        data: data.join("\n"),
                    });
                    if last {
                        return (events, opened);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "{url}: no final event within {deadline:?} ({opened} streams, {} events)",
        events.len()
    );
}
