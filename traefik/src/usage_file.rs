//! Usage records appended to a file on a plugin mount, which `ferrogate sidecar --usage-inbox`
//! ingests: the one channel out of a guest that cannot make calls.
//!
//! Each record is one JSON line written with one append, so records of concurrent instances
//! never interleave; the file is opened per record, so a rotation by the sidecar is followed.

use std::io::Write;

use ferrogate_core::usage::RecordView;

use crate::abi::{self, Level};

/// Appends `record` to `path`; a failure is logged and the record lost (the answer is not
/// held up for accounting).
pub(crate) fn append(path: &str, record: &RecordView<'_>) {
    let mut line = Vec::with_capacity(512);
    record.write_json_line(&mut line);
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    let written = std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(&line));
    if let Err(e) = written {
        abi::log_line(Level::Warn, &format!("ferrogate: usage record not written to {path}: {e}"));
    }
}
