//! Reading the usage file's newest records back at start, so the memory store answers queries
//! about the time before a restart. Only the tail is read (backwards, block by block), never
//! the whole file, however long it has grown.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use bytes::Bytes;

/// Bytes read per step, from the end backwards.
const BLOCK: usize = 1 << 20;

/// The last `n` record lines of `path` (none when it does not exist), as slices of one buffer.
/// Lines that are not one JSON object (one cut short by a crash) are skipped. A file not ending
/// in a newline gets one, so the next batch appended starts on a line of its own.
pub(super) fn load(path: &Path, n: usize) -> std::io::Result<Vec<Bytes>> {
    let mut file = match std::fs::OpenOptions::new().read(true).append(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last != *b"\n" {
            file.write_all(b"\n")?;
        }
    }
    let tail = Bytes::from(read_tail(&mut file, len, n, BLOCK)?);
    let mut lines = record_lines(&tail);
    let extra = lines.len().saturating_sub(n);
    lines.drain(..extra);
    Ok(lines)
}

/// The bytes of `file` (of length `len`) from the start of its last `n` lines, at least; read
/// backwards `block` bytes at a time until enough newlines are seen.
fn read_tail(file: &mut File, len: u64, n: usize, block: usize) -> std::io::Result<Vec<u8>> {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut start = len;
    let mut newlines = 0;
    // One newline more than `n`: the first line of the tail may be cut.
    while start > 0 && newlines <= n {
        let step = start.min(block as u64);
        start -= step;
        let mut buf = vec![0u8; usize::try_from(step).unwrap_or(block)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        newlines += buf.iter().filter(|&&b| b == b'\n').count();
        blocks.push(buf);
    }
    let mut tail = Vec::with_capacity(blocks.iter().map(Vec::len).sum());
    for buf in blocks.iter().rev() {
        tail.extend_from_slice(buf);
    }
    if start > 0 {
        // Drop the partial first line.
        let cut = tail.iter().position(|&b| b == b'\n').map_or(tail.len(), |i| i + 1);
        tail.drain(..cut);
    }
    Ok(tail)
}

/// The non-blank lines of `text` that look like one JSON object, trimmed.
fn record_lines(text: &Bytes) -> Vec<Bytes> {
    let mut lines = Vec::new();
    let mut from = 0;
    for raw in text.split(|b| *b == b'\n') {
        let start = from + raw.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let end = from + raw.len() - raw.iter().rev().take_while(|b| b.is_ascii_whitespace()).count();
        from += raw.len() + 1;
        if start < end && text.get(start) == Some(&b'{') && text.get(end - 1) == Some(&b'}') {
            lines.push(text.slice(start..end));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fg-tail-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn reads_the_last_lines_across_small_blocks() {
        let path = temp("usage.jsonl");
        let text: String = (0..50).map(|i| format!("{{\"n\":{i}}}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let mut file = File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        let tail = Bytes::from(read_tail(&mut file, len, 7, 16).unwrap());
        let lines = record_lines(&tail);
        assert!(lines.len() >= 7 && lines.len() < 50, "{}", lines.len());
        assert_eq!(lines.last().unwrap().as_ref(), b"{\"n\":49}");
        let all = load(&path, 7).unwrap();
        assert_eq!(all.len(), 7);
        assert_eq!(all[0].as_ref(), b"{\"n\":43}");
        assert_eq!(load(&path, 1000).unwrap().len(), 50);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_line_cut_by_a_crash_is_skipped_and_ended() {
        let path = temp("usage.jsonl");
        std::fs::write(&path, "{\"n\":1}\n{\"n\":2,\"cut").unwrap();
        let lines = load(&path, 10).unwrap();
        assert_eq!(lines.len(), 1);
        assert!(std::fs::read(&path).unwrap().ends_with(b"\"cut\n"), "the cut line is ended");
        assert!(load(&path.with_file_name("missing.jsonl"), 10).unwrap().is_empty());
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
