//! The inbox against a real memory store: each complete line once, partial lines waiting, the
//! offset across restarts, truncation, replacement, rotation and bad lines.

use std::io::Write;
use std::sync::Mutex;

use super::*;
use crate::services::usage::{Query, UsageStore};

fn line(id: u32) -> String {
    format!(
        r#"{{"request_id":"r{id}","key":"k","groups":[],"model_requested":"m","provider":"p","upstream_model":"u","status":200,"prompt_tokens":1,"completion_tokens":1,"cached_tokens":0,"cost_micro_usd":3,"latency_ms":1,"ttft_ms":null,"started_at_unix_ms":{id},"streamed":false}}"#
    )
}

fn lines(ids: std::ops::Range<u32>) -> String {
    ids.map(|i| line(i) + "\n").collect()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fg-inbox-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

fn memory() -> Arc<UsageBackend> {
    Arc::new(UsageBackend::memory(UsageStore::new(None)))
}

/// The request ids stored, sorted.
async fn ids(usage: &UsageBackend) -> Vec<u64> {
    let answer = usage.query(&Query { limit: Some(10_000), ..Query::default() }).await.unwrap();
    let mut ids: Vec<u64> = answer.records.iter().map(|r| r.started_at_unix_ms).collect();
    ids.sort_unstable();
    ids
}

fn range(ids: std::ops::Range<u32>) -> Vec<u64> {
    ids.map(u64::from).collect()
}

#[tokio::test]
async fn complete_lines_are_ingested_once_and_a_partial_line_waits() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    let seen = batches.clone();
    inbox.stored = Some(Box::new(move |batch: &[u8]| seen.lock().unwrap().push(batch.to_vec())));
    inbox.poll().await;
    assert!(ids(&usage).await.is_empty(), "no inbox yet");
    let third = line(2);
    append(&path, &(lines(0..2) + &third[..20]));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..2));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..2), "nothing twice, the partial line waits");
    append(&path, &format!("{}\n", &third[20..]));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..3));
    let batches = batches.lock().unwrap();
    assert_eq!(batches.len(), 2, "one batch per poll, handed on once stored");
    assert_eq!(batches[1], third.as_bytes());
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn the_offset_survives_a_restart() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    append(&path, &lines(0..3));
    Inbox::open(path.clone(), usage.clone()).poll().await;
    assert_eq!(ids(&usage).await, range(0..3));
    append(&path, &lines(3..5));
    let mut again = Inbox::open(path.clone(), usage.clone());
    again.poll().await;
    again.poll().await;
    assert_eq!(ids(&usage).await, range(0..5), "a new inbox over the same files ingests nothing twice");
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("inbox.jsonl.offset")).unwrap()).unwrap();
    assert_eq!(kept["offset"], std::fs::metadata(&path).unwrap().len());
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_truncated_or_replaced_inbox_is_read_from_its_start() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    append(&path, &lines(0..3));
    inbox.poll().await;
    // Truncated in place, then a shorter content.
    std::fs::write(&path, lines(3..4)).unwrap();
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..4));
    // Replaced by another file (another inode) already longer than the offset.
    let next = dir.join("next.jsonl");
    std::fs::write(&next, lines(4..9)).unwrap();
    std::fs::rename(&next, &path).unwrap();
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..9));
    // Removed, then written again.
    std::fs::remove_file(&path).unwrap();
    inbox.poll().await;
    append(&path, &lines(9..10));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..10));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn rotation_ingests_every_record_exactly_once() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let rotated = dir.join("inbox.jsonl.1");
    let usage = memory();
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    inbox.rotate_at = 1_000;
    append(&path, &lines(0..10));
    inbox.poll().await;
    assert!(rotated.exists() && !path.exists(), "fully ingested and past the size: rotated");
    // A writer that opened the file before the rename, and a new one.
    append(&rotated, &lines(10..12));
    append(&path, &lines(12..14));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..14));
    // A second rotation replaces the first one's file; a restart in between loses nothing.
    append(&path, &lines(14..24));
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    inbox.rotate_at = 1_000;
    inbox.poll().await;
    append(&path, &lines(24..25));
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    for _ in 0..3 {
        inbox.poll().await;
    }
    assert_eq!(ids(&usage).await, range(0..25));
    assert_eq!(std::fs::read_to_string(&rotated).unwrap(), lines(12..24));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_file_rotated_by_someone_else_is_finished_first() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    append(&path, &lines(0..2));
    inbox.poll().await;
    append(&path, &lines(2..3));
    std::fs::rename(&path, dir.join("inbox.jsonl.1")).unwrap();
    append(&path, &lines(3..4));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..3), "the rotated file first; the new one a poll later");
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..4));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn bad_lines_are_skipped_and_counted() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    append(&path, &format!("{}\nnot json\n[1,2]\n\n{{\"cut\n{}", line(0), lines(1..3)));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..3));
    assert_eq!(inbox.skipped(), 3);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn the_offset_advances_only_once_the_batch_is_stored() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    // The store's usage file is in a directory that does not exist yet: every batch fails.
    let usage = Arc::new(UsageBackend::memory(UsageStore::new(Some(dir.join("later").join("usage.jsonl")))));
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    append(&path, &lines(0..2));
    inbox.poll().await;
    inbox.poll().await;
    assert!(ids(&usage).await.is_empty());
    assert_eq!(inbox.cursor.offset, 0);
    std::fs::create_dir_all(dir.join("later")).unwrap();
    inbox.poll().await;
    assert_eq!(ids(&usage).await, range(0..2));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn an_object_the_store_refuses_as_a_record_is_skipped() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    // The Postgres store parses every line as a record before it needs its database.
    let usage = Arc::new(UsageBackend::postgres(Arc::new(std::sync::OnceLock::new())));
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    append(&path, "{\"status\":\"x\"}\n{}\n");
    inbox.poll().await;
    assert_eq!(inbox.skipped(), 2);
    assert_eq!(inbox.cursor.offset, std::fs::metadata(&path).unwrap().len(), "nothing left to store");
    // A record waits for the database: the offset stays.
    append(&path, &lines(0..1));
    inbox.poll().await;
    assert_eq!(inbox.cursor.offset, 18);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn an_unfinished_line_in_the_rotated_file_does_not_hold_up_the_inbox() {
    let dir = scratch();
    let path = dir.join("inbox.jsonl");
    let usage = memory();
    let mut inbox = Inbox::open(path.clone(), usage.clone());
    inbox.rotate_at = 500;
    append(&path, &lines(0..3));
    inbox.poll().await;
    // A writer of the old file stopped in the middle of its record.
    append(&dir.join("inbox.jsonl.1"), &line(3)[..40]);
    append(&path, &lines(4..5));
    inbox.poll().await;
    assert_eq!(ids(&usage).await, [0, 1, 2, 4]);
    assert_eq!(inbox.skipped(), 1);
    std::fs::remove_dir_all(dir).unwrap();
}
