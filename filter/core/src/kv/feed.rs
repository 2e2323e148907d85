//! The KV feed (`GET /v1/kv?epoch=E&since=G` on the sidecar): the sidecar's block index as
//! changes since generation `G`, or — when `G` is of another epoch (the sidecar restarted, a
//! pool changed) or older than the changes it keeps — everything, marked `reset`.
//!
//! Binary, little-endian, fixed-size operations so a large answer parses in one pass:
//!
//! ```text
//! "FGKV" 1                       magic, version
//! epoch u64, generation u64      the index this answer brings the reader to
//! flags u8                       bit 0: reset (drop everything first)
//! providers u16, then per provider:
//!   name_len u16, name, endpoints u8, then per endpoint:
//!     flags u8 (bit 0: connected), address_len u16, address
//! ops u32, then per op (12 bytes):
//!   kind u8 (1 add GPU, 2 add CPU, 6 add storage, 3 remove GPU, 4 remove CPU,
//!            7 remove storage, 5 clear endpoint),
//!   provider u16, endpoint u8, key u64
//! ```
//!
//! Providers and endpoints are positions in this answer's tables; an endpoint's position is its
//! bit in the index's holder sets, stable within an epoch.

use super::Tier;

const MAGIC: &[u8; 5] = b"FGKV\x01";

/// One change to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    /// `endpoint` of `provider` now holds block `key` in `tier`.
    Add {
        /// Position in [`KvFeed::providers`].
        provider: u16,
        /// Position in that provider's endpoints.
        endpoint: u8,
        /// The block key ([`super::keys`]).
        key: u64,
        /// Where it is held.
        tier: Tier,
    },
    /// `endpoint` no longer holds `key` in `tier`.
    Remove {
        /// Position in [`KvFeed::providers`].
        provider: u16,
        /// Position in that provider's endpoints.
        endpoint: u8,
        /// The block key.
        key: u64,
        /// Where it was held.
        tier: Tier,
    },
    /// `endpoint` holds nothing (it cleared its cache, restarted, or its stream had a gap
    /// replay could not fill).
    Clear {
        /// Position in [`KvFeed::providers`].
        provider: u16,
        /// Position in that provider's endpoints.
        endpoint: u8,
    },
}

/// One endpoint of a provider, as the sidecar sees its event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEndpoint {
    /// `host:port`, as in the configuration.
    pub address: String,
    /// Whether its event stream is connected (a disconnected endpoint scores neutral).
    pub connected: bool,
}

/// One provider's endpoints, in bit order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedProvider {
    /// The provider's name.
    pub name: String,
    /// Its KV endpoints.
    pub endpoints: Vec<FeedEndpoint>,
}

/// One answer of the feed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvFeed {
    /// Changes when the sidecar's index starts over.
    pub epoch: u64,
    /// The generation this answer brings the reader to.
    pub generation: u64,
    /// Drop everything before applying the operations.
    pub reset: bool,
    /// The providers the operations refer to.
    pub providers: Vec<FeedProvider>,
    /// The changes, in order.
    pub ops: Vec<KvOp>,
}

/// Why a feed answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    /// It does not start with the magic and version.
    #[error("not a KV feed (bad magic or version)")]
    Magic,
    /// It ends inside a field.
    #[error("KV feed truncated at byte {0}")]
    Truncated(usize),
    /// A name is not UTF-8.
    #[error("KV feed name at byte {0} is not UTF-8")]
    Utf8(usize),
    /// An operation has an unknown kind.
    #[error("KV feed operation {0} has unknown kind {1}")]
    Kind(usize, u8),
    /// Bytes follow the last operation.
    #[error("KV feed has {0} bytes after its operations")]
    Trailing(usize),
}

impl KvFeed {
    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.ops.len() * 12);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.push(u8::from(self.reset));
        out.extend_from_slice(&(self.providers.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        for p in self.providers.iter().take(usize::from(u16::MAX)) {
            put_str(&mut out, &p.name);
            out.push(p.endpoints.len().min(usize::from(u8::MAX)) as u8);
            for e in p.endpoints.iter().take(usize::from(u8::MAX)) {
                out.push(u8::from(e.connected));
                put_str(&mut out, &e.address);
            }
        }
        out.extend_from_slice(&(self.ops.len().min(u32::MAX as usize) as u32).to_le_bytes());
        for op in &self.ops {
            let (kind, provider, endpoint, key) = match *op {
                KvOp::Add { provider, endpoint, key, tier } => (add_kind(tier), provider, endpoint, key),
                KvOp::Remove { provider, endpoint, key, tier } => (remove_kind(tier), provider, endpoint, key),
                KvOp::Clear { provider, endpoint } => (5, provider, endpoint, 0),
            };
            out.push(kind);
            out.extend_from_slice(&provider.to_le_bytes());
            out.push(endpoint);
            out.extend_from_slice(&key.to_le_bytes());
        }
        out
    }

    /// Reads an answer.
    ///
    /// # Errors
    /// The bytes are not a feed answer ([`FeedError`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, FeedError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
            return Err(FeedError::Magic);
        }
        let (epoch, generation, reset) = (r.u64()?, r.u64()?, r.u8()? & 1 == 1);
        let count = r.u16()?;
        let mut providers = Vec::with_capacity(usize::from(count).min(1024));
        for _ in 0..count {
            let name = r.str()?;
            let n = r.u8()?;
            let mut endpoints = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let connected = r.u8()? & 1 == 1;
                endpoints.push(FeedEndpoint { connected, address: r.str()? });
            }
            providers.push(FeedProvider { name, endpoints });
        }
        let count = r.u32()? as usize;
        let mut ops = Vec::with_capacity(count.min(r.remaining() / 12));
        for i in 0..count {
            ops.push(r.op(i)?);
        }
        match r.remaining() {
            0 => Ok(Self { epoch, generation, reset, providers, ops }),
            n => Err(FeedError::Trailing(n)),
        }
    }
}

/// The wire kind of adding a block in `tier` (the first two predate the storage tier).
fn add_kind(tier: Tier) -> u8 {
    match tier {
        Tier::Gpu => 1,
        Tier::Cpu => 2,
        Tier::Storage => 6,
    }
}

/// The wire kind of removing a block from `tier`.
fn remove_kind(tier: Tier) -> u8 {
    match tier {
        Tier::Gpu => 3,
        Tier::Cpu => 4,
        Tier::Storage => 7,
    }
}

/// Whether `kind` adds (`true`) or removes a block, and in which tier.
fn adds_or_removes(kind: u8) -> Option<(bool, Tier)> {
    Tier::ALL.into_iter().find_map(|t| {
        if kind == add_kind(t) {
            Some((true, t))
        } else {
            (kind == remove_kind(t)).then_some((false, t))
        }
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes().get(..s.len().min(usize::from(u16::MAX))).unwrap_or_default();
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FeedError> {
        let out = self.bytes.get(self.at..self.at.saturating_add(n)).ok_or(FeedError::Truncated(self.at))?;
        self.at += n;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], FeedError> {
        let at = self.at;
        self.take(N)?.try_into().map_err(|_| FeedError::Truncated(at))
    }
    fn u8(&mut self) -> Result<u8, FeedError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, FeedError> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, FeedError> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, FeedError> {
        self.array().map(u64::from_le_bytes)
    }
    fn str(&mut self) -> Result<String, FeedError> {
        let len = usize::from(self.u16()?);
        let at = self.at;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| FeedError::Utf8(at))
    }
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }
    fn op(&mut self, index: usize) -> Result<KvOp, FeedError> {
        let (kind, provider, endpoint, key) = (self.u8()?, self.u16()?, self.u8()?, self.u64()?);
        Ok(match kind {
            5 => KvOp::Clear { provider, endpoint },
            kind => match adds_or_removes(kind) {
                Some((true, tier)) => KvOp::Add { provider, endpoint, key, tier },
                Some((false, tier)) => KvOp::Remove { provider, endpoint, key, tier },
                None => return Err(FeedError::Kind(index, kind)),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KvFeed {
        let endpoints = vec![
            FeedEndpoint { address: "10.0.0.1:8000".into(), connected: true },
            FeedEndpoint { address: "10.0.0.2:8000".into(), connected: false },
        ];
        KvFeed {
            epoch: 7,
            generation: 42,
            reset: true,
            providers: vec![FeedProvider { name: "pool".into(), endpoints }],
            ops: vec![
                KvOp::Add { provider: 0, endpoint: 1, key: u64::MAX, tier: Tier::Cpu },
                KvOp::Remove { provider: 0, endpoint: 0, key: 3, tier: Tier::Gpu },
                KvOp::Add { provider: 0, endpoint: 0, key: 4, tier: Tier::Storage },
                KvOp::Remove { provider: 0, endpoint: 1, key: 5, tier: Tier::Storage },
                KvOp::Add { provider: 0, endpoint: 0, key: 6, tier: Tier::Gpu },
                KvOp::Remove { provider: 0, endpoint: 1, key: 7, tier: Tier::Cpu },
                KvOp::Clear { provider: 0, endpoint: 1 },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let feed = sample();
        assert_eq!(KvFeed::decode(&feed.encode()), Ok(feed));
        assert_eq!(KvFeed::decode(&KvFeed::default().encode()), Ok(KvFeed::default()));
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(KvFeed::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(KvFeed::decode(&longer), Err(FeedError::Trailing(1)));
        let mut bad = bytes;
        let kind_at = bad.len() - sample().ops.len() * 12;
        bad[kind_at] = 9;
        assert_eq!(KvFeed::decode(&bad), Err(FeedError::Kind(0, 9)));
    }
}
