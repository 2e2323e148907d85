//! The Gemini generateContent request translator, to every provider dialect, over arbitrary bytes.
#![no_main]

#[path = "translate_common.rs"]
mod common;

use ferrogate_core::translate::Inbound;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| common::request(Inbound::Gemini, data));
