//! Server-sent events read off a streaming HTTP body, one whole event at a time, for the
//! federation's calls to MCP servers (their answers, and the HTTP+SSE transport's stream).

use bytes::Bytes;
use http_body_util::BodyExt;

/// The most an unfinished event may hold before the stream counts as broken.
const MAX_EVENT_BYTES: usize = 16 << 20;

/// One event: its `event:` name (absent: `message`) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field.
    pub name: Option<String>,
    /// The `data:` lines.
    pub data: String,
}

/// Reads events off `body` as they arrive.
pub struct EventReader<B> {
    body: B,
    buf: Vec<u8>,
    /// Where the search for the event's end resumes (what is before holds no blank line).
    scanned: usize,
    done: bool,
}

impl<B> EventReader<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// A reader of `body`'s events.
    pub fn new(body: B) -> Self {
        Self { body, buf: Vec::new(), scanned: 0, done: false }
    }

    /// The next event; `Ok(None)` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<Event>, String> {
        loop {
            if let Some(end) = find_blank_line(&self.buf, self.scanned) {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                self.scanned = 0;
                match parse(&raw) {
                    Some(event) => return Ok(Some(event)),
                    None => continue, // a comment or an empty event
                }
            }
            if self.done {
                return Ok(None);
            }
            // The last byte may start a blank line the next chunk ends.
            self.scanned = self.buf.len().saturating_sub(1);
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        // A bare CR ends a line too, but servers write LF or CRLF: CRs go.
                        self.buf.extend(data.iter().copied().filter(|b| *b != b'\r'));
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => {
                    self.done = true;
                    self.buf.extend_from_slice(b"\n\n");
                }
            }
            if self.buf.len() > MAX_EVENT_BYTES {
                return Err(format!("an event longer than {MAX_EVENT_BYTES} bytes"));
            }
        }
    }
}

fn find_blank_line(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\n\n").map(|i| i + from)
}

/// An event's fields; `None` when it has no data (comments, `retry:` alone).
fn parse(raw: &[u8]) -> Option<Event> {
    let text = String::from_utf8_lossy(raw);
    let (mut name, mut data, mut has_data) = (None, String::new(), false);
    for line in text.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = Some(value.to_string()),
            "data" => {
                if has_data {
                    data.push('\n');
                }
                data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    has_data.then_some(Event { name, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    fn body(chunks: &[&'static str]) -> impl http_body::Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames = chunks.iter().map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes()))));
        StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn events_across_chunks_crlf_and_comments() {
        let mut r = EventReader::new(body(&[
            ": ping\n\nevent: endpoint\r\ndata: /messages/?session_id=1\r\n\r",
            "\nid: 7\ndata: {\"a\":\ndata: 1}\n\ndata: tail",
        ]));
        let ev = |name: Option<&str>, data: &str| Event { name: name.map(str::to_string), data: data.into() };
        assert_eq!(r.next().await.unwrap(), Some(ev(Some("endpoint"), "/messages/?session_id=1")));
        assert_eq!(r.next().await.unwrap(), Some(ev(None, "{\"a\":\n1}")));
        // The stream's end closes an unfinished event.
        assert_eq!(r.next().await.unwrap(), Some(ev(None, "tail")));
        assert_eq!(r.next().await.unwrap(), None);
    }
}
