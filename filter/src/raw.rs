//! The one place the filter calls the host directly, for two hot calls:
//! - reading a header map as the host's serialized buffer, so it can be parsed in place
//!   ([`ferrogate_core::header_map`]) instead of as one `String` and one `Vec` per header (the
//!   SDK's `get_http_*_headers_bytes`). Every request reads two maps; the per-header
//!   allocations were a measurable share of the filter.
//! - the clock as plain nanoseconds: the overhead measurement reads it about ten times per
//!   request, and the SDK's `get_current_time` builds a `SystemTime` each time that the filter
//!   only turns back into nanoseconds.
#![allow(unsafe_code)] // a hostcall and taking ownership of the buffer the host allocated

use proxy_wasm::types::MapType;

#[link(wasm_import_module = "env")]
extern "C" {
    // The same import the SDK declares; the map type is its `u32` discriminant.
    fn proxy_get_header_map_pairs(map_type: u32, return_map_data: *mut *mut u8, return_map_size: *mut usize) -> u32;
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
}

/// The host's wall clock in nanoseconds since the Unix epoch (0 if the host refuses).
pub(crate) fn now_nanos() -> u64 {
    let mut nanos: u64 = 0;
    // SAFETY: the host writes one u64 into our out-parameter.
    let status = unsafe { proxy_get_current_time_nanoseconds(&mut nanos) };
    if status != 0 {
        return 0;
    }
    nanos
}

/// The serialized header map `map` (empty when the host has none or refuses).
pub(crate) fn header_map(map: MapType) -> Vec<u8> {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: the host writes a pointer and a size into our two out-parameters.
    let status = unsafe { proxy_get_header_map_pairs(map as u32, &mut data, &mut size) };
    if status != 0 || data.is_null() {
        return Vec::new();
    }
    // SAFETY: the host allocated `size` bytes at `data` through this module's
    // `proxy_on_memory_allocate` (a boxed slice of exactly `size` bytes, alignment 1) and
    // hands ownership to us, as the SDK's own `get_map_bytes` assumes.
    unsafe { Vec::from_raw_parts(data, size, size) }
}
