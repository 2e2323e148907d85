//! The serialized header map reader: never panics; every pair it yields lies inside the buffer
//! and the pairs never overlap (each starts after the previous one's NUL).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|buf: &[u8]| {
    let base = buf.as_ptr() as usize;
    let mut next = 0;
    for (name, value) in ferrogate_core::header_map::pairs(buf) {
        let (k, v) = (name.as_ptr() as usize - base, value.as_ptr() as usize - base);
        assert!(k >= next && v == k + name.len() + 1 && v + value.len() <= buf.len());
        next = v + value.len() + 1;
    }
});
