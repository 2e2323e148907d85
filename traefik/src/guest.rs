//! One guest instance's state: its settings, the configuration in use, its limit counters and
//! the request between `handle_request` and `handle_response`.
//!
//! Traefik instantiates a guest per concurrent request from a pool and hands the same instance
//! both calls of a request, so one pending request per instance is all there is to keep.

use std::cell::RefCell;
use std::rc::Rc;

use ferrogate_core::config::Config;
use ferrogate_core::keypool::KeyTable;
use ferrogate_core::traefik::Settings;

use crate::abi;
use crate::counters::MemoryCounters;
use crate::response::Pending;
use crate::snapshot_file::SnapshotFile;

/// The instance's state.
pub(crate) struct Guest {
    /// The settings, or why they were refused (every request then answers 503 with it).
    pub(crate) settings: Result<Settings, String>,
    /// The configuration new requests use: the inline one until a snapshot file is read.
    pub(crate) active: Option<Rc<Config>>,
    pub(crate) snapshot: SnapshotFile,
    pub(crate) counters: MemoryCounters,
    /// Drives request ids and round-robin choices.
    pub(crate) seq: u64,
    /// The request waiting for its answer.
    pub(crate) pending: Option<Pending>,
    /// Pooled provider keys this instance saw refused ([`crate::keys`]).
    pub(crate) keys: KeyTable,
}

thread_local! {
    static GUEST: RefCell<Option<Guest>> = const { RefCell::new(None) };
}

/// Runs `f` on the instance's state, made on the first call (settings are read then, since
/// Traefik offers no other moment the guest controls).
pub(crate) fn with_guest<R>(f: impl FnOnce(&mut Guest) -> R) -> R {
    GUEST.with(|cell| {
        let mut slot = cell.borrow_mut();
        let guest = slot.get_or_insert_with(Guest::load);
        f(guest)
    })
}

impl Guest {
    fn load() -> Guest {
        let settings = Settings::from_json_slice(&abi::config()).map_err(|e| e.to_string());
        if let Err(e) = &settings {
            abi::log_line(abi::Level::Error, &format!("ferrogate: the middleware's settings are refused: {e}"));
        }
        let active = settings.as_ref().ok().and_then(|s| s.config.clone()).map(Rc::new);
        if let Some(config) = &active {
            crate::guard::warn_skipped_checks(config);
        }
        Guest {
            settings,
            active,
            snapshot: SnapshotFile::default(),
            counters: MemoryCounters::default(),
            seq: 0,
            pending: None,
            keys: KeyTable::default(),
        }
    }

    /// The next sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Reads the snapshot file again when it is due and changed.
    pub(crate) fn refresh(&mut self, now_ms: u64) {
        let Ok(settings) = &self.settings else { return };
        if let Some(config) = self.snapshot.refresh(settings, now_ms) {
            crate::guard::warn_skipped_checks(&config);
            self.active = Some(Rc::new(config));
        }
    }
}

/// Wall-clock time in nanoseconds since the Unix epoch (Traefik gives guests the real wall
/// clock; its monotonic clock is not real time).
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
