//! A scripted HTTP/1.1 upstream over raw TCP, for faults a real engine does not make on
//! demand: one that accepts and never answers, one that sends part of an event stream and
//! then goes silent, one that streams slowly but steadily.

// Shared by several test binaries, each using a part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the upstream does with each request.
#[derive(Clone)]
pub enum Script {
    /// Reads the request and never answers (the connection stays open).
    Silent,
    /// Sends an event-stream head and these events, then stays silent with the connection open.
    StallAfter(Vec<String>),
    /// Sends an event-stream head and these events `gap` apart, then ends the body.
    Steady(Vec<String>, Duration),
    /// Answers at once with a JSON-RPC result holding the request head it received
    /// (`{"result": {"head": "..."}}`, lower-cased).
    EchoHead,
}

/// Starts the upstream on a free port; returns its address.
pub async fn start(script: Script) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve(tcp, script.clone()));
        }
    });
    addr
}

async fn serve(mut tcp: TcpStream, script: Script) {
    let Some(head) = read_request(&mut tcp).await else { return };
    match script {
        Script::Silent => {}
        Script::EchoHead => {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"head": head}}).to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            // Closed after the answer (`connection: close`): one request per connection here.
            let _ = tcp.write_all(answer.as_bytes()).await;
            return;
        }
        Script::StallAfter(events) => {
            if write_stream(&mut tcp, &events, Duration::ZERO).await.is_none() {
                return;
            }
        }
        Script::Steady(events, gap) => {
            if write_stream(&mut tcp, &events, gap).await.is_some() {
                let _ = tcp.write_all(b"0\r\n\r\n").await;
            }
        }
    }
    // Hold the connection until the gateway closes it.
    let mut buf = [0u8; 1024];
    while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Reads one request (head and a `content-length` body); its head, lower-cased, or `None` if
/// the peer left first.
async fn read_request(tcp: &mut TcpStream) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tcp.read(&mut buf).await.ok().filter(|&n| n > 0)?;
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    while got.len() < head_end + length {
        let n = tcp.read(&mut buf).await.ok().filter(|&n| n > 0)?;
        got.extend_from_slice(&buf[..n]);
    }
    Some(head)
}

/// An event-stream response head, then each event as its own chunk, `gap` apart.
async fn write_stream(tcp: &mut TcpStream, events: &[String], gap: Duration) -> Option<()> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    tcp.write_all(head.as_bytes()).await.ok()?;
    for (i, event) in events.iter().enumerate() {
        if i > 0 && !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        tcp.write_all(chunk.as_bytes()).await.ok()?;
    }
    Some(())
}

/// An OpenAI chat-completions chunk carrying `text`.
pub fn openai_chunk(text: &str) -> String {
    let chunk = serde_json::json!({"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 1,
        "model": "raw", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

/// The end of an OpenAI chat-completions stream: the finish reason, usage, `[DONE]`.
pub fn openai_end(completion_tokens: u64) -> Vec<String> {
    let finish = serde_json::json!({"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 1,
        "model": "raw", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let usage = serde_json::json!({"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 1,
        "model": "raw", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": completion_tokens, "total_tokens": 5 + completion_tokens}});
    vec![format!("data: {finish}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".to_string()]
}

/// The start of an Anthropic messages stream and a text delta per entry of `texts`.
pub fn anthropic_events(texts: &[&str]) -> Vec<String> {
    let start = serde_json::json!({"type": "message_start", "message": {"id": "msg_raw", "type": "message",
        "role": "assistant", "model": "raw", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 5, "output_tokens": 1}}});
    let block = serde_json::json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}});
    let mut events = vec![
        format!("event: message_start\ndata: {start}\n\n"),
        format!("event: content_block_start\ndata: {block}\n\n"),
    ];
    for text in texts {
        let delta = serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}});
        events.push(format!("event: content_block_delta\ndata: {delta}\n\n"));
    }
    events
}
