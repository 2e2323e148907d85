//! The filter's two KV parsers: the `GET /v1/kv` answer (`KvFeed::decode`) and the
//! `x-ferrogate-token-ids` header. Neither panics; a decoded feed encodes to bytes that decode
//! to the same feed; parsed token ids written back parse to the same ids.
#![no_main]

use ferrogate_core::kv::{parse_token_ids, KvFeed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(feed) = KvFeed::decode(data) {
        assert_eq!(KvFeed::decode(&feed.encode()), Ok(feed));
    }
    let mut ids = Vec::new();
    if parse_token_ids(data, &mut ids).is_ok() {
        let text = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let mut again = Vec::new();
        assert!(parse_token_ids(text.as_bytes(), &mut again).is_ok());
        assert_eq!(again, ids);
    }
});
