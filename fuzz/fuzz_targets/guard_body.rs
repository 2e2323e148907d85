//! The guardrails' body walker over arbitrary bytes under every shape: the text parts are read
//! or the body refused, never a panic; a rewrite that uppercases every text part gives a body
//! whose text parts are exactly the uppercased ones, in the same order.
#![no_main]

use std::convert::Infallible;

use ferrogate_core::guard::body::{rewrite, text_chars, texts, Shape};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for shape in Shape::ALL {
        let Ok(before) = texts(shape, data) else {
            assert!(text_chars(shape, data).is_err());
            assert!(rewrite::<Infallible>(shape, data, &mut |_| Ok(None)).is_err());
            continue;
        };
        let chars: usize = before.iter().map(|t| t.chars().count()).sum();
        assert_eq!(text_chars(shape, data).ok(), Some(chars));
        let upper: Vec<String> = before.iter().map(|t| t.to_uppercase()).collect();
        match rewrite::<Infallible>(shape, data, &mut |t| Ok(Some(t.to_uppercase()))) {
            Ok(Some(out)) => assert_eq!(texts(shape, &out).ok(), Some(upper), "{shape:?}"),
            Ok(None) => assert_eq!(before, upper, "{shape:?}: a text changed but no body was written"),
            Err(e) => panic!("{shape:?}: the texts were read but the rewrite failed: {e}"),
        }
    }
});
