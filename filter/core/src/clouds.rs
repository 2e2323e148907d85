//! Cloud providers reached with their own wire protocols rather than a bearer key. For AWS
//! Bedrock the filter signs each upstream request itself and reads streamed answers framed in
//! AWS's binary event-stream encoding:
//!
//! - [`sigv4`]: AWS Signature Version 4 over a fully buffered request (credentials and the
//!   request time are passed in: no clock here).
//! - [`eventstream`]: an incremental, bounded decoder of `application/vnd.amazon.eventstream`.

pub mod eventstream;
pub mod sigv4;
