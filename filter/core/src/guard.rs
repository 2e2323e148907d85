//! Guardrails: detectors of sensitive text (PII, secrets, custom patterns and words), the
//! rules that act on what they find (block, redact, mask, log), and the rewriting that applies
//! them to request bodies, answers and streamed answers in every dialect.
//!
//! - [`detect`]: the detectors, pure scanners with bounded work per byte.
//! - [`scan`]: a rule set over a text: its hits, the verdict, the rewritten text, and the
//!   per-request [`scan::Vault`] of placeholders (restored in the answer when asked).
//! - [`apply`]: the policies of a request over a whole body (what the filter calls).
//! - [`check`]: the wire contract of external checks (webhooks, moderation endpoints).
//! - [`body`]: the text parts of a JSON request or answer, per dialect.
//! - [`stream`]: redaction of text that arrives in pieces, with a bounded look-behind.
//! - [`sse`]: that redaction applied to the text deltas of each dialect's event stream.

pub mod apply;
pub mod body;
pub mod check;
pub mod detect;
pub mod scan;
pub mod sse;
pub mod stream;

pub use scan::{Action, Blocked, Rule, RuleSet, Vault};
