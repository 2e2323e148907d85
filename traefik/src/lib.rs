//! ferrogate-traefik: ferrogate as a Traefik v3 middleware (the http-wasm handler ABI).
//!
//! The same `ferrogate_core` as the proxy-wasm filter, behind the two calls Traefik makes per
//! request: [`request`] authenticates, answers what it can itself (errors in the caller's
//! dialect, the model list), applies the guardrails' input rules ([`guard`]), routes, applies
//! the limits and rewrites the request (model, credential, path, the provider in the routing
//! header Traefik's routers match); [`response`] translates a buffered answer back, applies the
//! output rules to a non-streamed one and writes its usage record.
//!
//! What Traefik's ABI cannot do shapes the rest: no calls out, so the configuration comes
//! inline or from a snapshot file on a plugin mount ([`snapshot_file`]) and usage goes to a
//! file the sidecar ingests ([`usage_file`]); no shared state, so limits count per guest
//! instance ([`counters`]); a stream's answer is not seen unless buffered whole.

mod abi;
mod counters;
mod guard;
mod guest;
mod keys;
mod record;
mod reply;
mod request;
mod response;
mod snapshot_file;
mod usage_file;

/// The exports Traefik's host calls (`no_mangle` exports are what the ABI is made of).
#[allow(missing_docs, unsafe_code)]
mod exports {
    /// Called for each request: the upper 32 bits are a context handed back to
    /// `handle_response`, the lower ones say whether the request goes on (1) or was answered (0).
    #[no_mangle]
    pub extern "C" fn handle_request() -> u64 {
        crate::guest::with_guest(|g| g.on_request())
    }

    /// Called after the next handler answered, on the instance that handled the request.
    #[no_mangle]
    pub extern "C" fn handle_response(ctx: u32, is_error: u32) {
        crate::guest::with_guest(|g| g.on_response(ctx, is_error != 0));
    }
}
