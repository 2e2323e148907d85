//! The response cache's request canonicalization (`ferrogate_core::cache::key`) over arbitrary
//! bodies, for every API: never panics; a body it keys gets the same digest twice, and the
//! semantic split never panics either.
#![no_main]

use ferrogate_core::cache::key::{exact_key, semantic_parts};
use ferrogate_core::route::Api;
use libfuzzer_sys::fuzz_target;

const APIS: [Api; 7] = [
    Api::ChatCompletions,
    Api::Completions,
    Api::Embeddings,
    Api::Messages,
    Api::GenerateContent,
    Api::StreamGenerateContent,
    Api::Responses,
];

fuzz_target!(|data: &[u8]| {
    for api in APIS {
        if let Ok(digest) = exact_key(api, data, "m", "key:k") {
            assert_eq!(digest.len(), 64);
            assert_eq!(exact_key(api, data, "m", "key:k"), Ok(digest));
        }
        let _ = semantic_parts(api, data, "m", "key:k");
    }
});
