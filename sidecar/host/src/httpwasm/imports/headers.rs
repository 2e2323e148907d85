//! get_header_names, get_header_values, set_header_value, add_header_value, remove_header:
//! request headers are Go's `r.Header` (plus `r.Host` as `host`), response headers
//! `w.Header()`, and both trailer kinds live in `w.Header()` as `Trailer:<name>` keys, where
//! `add` replaces like `set` (host-go v0.7.0).

use wasmtime::{Caller, Linker};

use super::{before_next, before_next_or_feature, request, MODULE};
use crate::httpwasm::header::canonical_key;
use crate::httpwasm::memory::{read, read_string, write_nul_terminated};
use crate::httpwasm::state::{Ctx, RequestState, BUFFER_RESPONSE};

/// Go's `http.TrailerPrefix`.
const TRAILER_PREFIX: &str = "Trailer:";

/// The four header kinds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Request,
    Response,
    RequestTrailers,
    ResponseTrailers,
}

impl Kind {
    fn of(kind: i32) -> wasmtime::Result<Kind> {
        match kind {
            0 => Ok(Kind::Request),
            1 => Ok(Kind::Response),
            2 => Ok(Kind::RequestTrailers),
            3 => Ok(Kind::ResponseTrailers),
            other => Err(wasmtime::Error::msg(format!("unsupported header kind: {other}"))),
        }
    }

    fn is_trailers(self) -> bool {
        matches!(self, Kind::RequestTrailers | Kind::ResponseTrailers)
    }
}

/// host-go `mustHeaderMutable`.
fn must_be_mutable(s: &RequestState, op: &str, kind: Kind) -> wasmtime::Result<()> {
    match kind {
        Kind::Request => before_next(s, op, "request header"),
        Kind::RequestTrailers => before_next(s, op, "request trailer"),
        Kind::Response => before_next_or_feature(s, BUFFER_RESPONSE, op, "response header"),
        Kind::ResponseTrailers => before_next_or_feature(s, BUFFER_RESPONSE, op, "response trailer"),
    }
}

/// Header names of `kind`, sorted as host-go sorts them (canonical form), lower-cased.
fn names(s: &RequestState, kind: Kind) -> Vec<Vec<u8>> {
    let mut names: Vec<String> = match kind {
        Kind::Request => {
            let mut names: Vec<String> =
                s.header.keys().filter(|k| !k.starts_with(TRAILER_PREFIX)).map(String::from).collect();
            if !s.host.is_empty() {
                names.push("Host".into());
            }
            names
        }
        Kind::Response => {
            s.response.header.keys().filter(|k| !k.starts_with(TRAILER_PREFIX)).map(String::from).collect()
        }
        _ => s.response.header.keys().filter_map(|k| k.strip_prefix(TRAILER_PREFIX)).map(String::from).collect(),
    };
    names.sort();
    names.into_iter().map(|n| n.to_lowercase().into_bytes()).collect()
}

/// Values of `name` in `kind`.
fn values(s: &RequestState, kind: Kind, name: &str) -> Vec<Vec<u8>> {
    match kind {
        Kind::Request if canonical_key(name) == "Host" => vec![s.host.clone()],
        Kind::Request => s.header.values(name),
        Kind::Response => s.response.header.values(name),
        _ => s.response.header.values(&format!("{TRAILER_PREFIX}{name}")),
    }
}

/// Adds the five header functions.
pub(super) fn add_to_linker(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "get_header_names", |mut caller: Caller<'_, Ctx>, kind: i32, buf: i32, limit: i32| {
        let kind = Kind::of(kind)?;
        let names = names(request(&mut caller)?, kind);
        write_nul_terminated(&mut caller, buf, limit, &names)
    })?;
    linker.func_wrap(
        MODULE,
        "get_header_values",
        |mut caller: Caller<'_, Ctx>, kind: i32, name: i32, name_len: i32, buf: i32, limit: i32| {
            let name = header_name(&mut caller, name, name_len)?;
            let kind = Kind::of(kind)?;
            let values = values(request(&mut caller)?, kind, &name);
            write_nul_terminated(&mut caller, buf, limit, &values)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "set_header_value",
        |caller: Caller<'_, Ctx>, kind: i32, name: i32, name_len: i32, value: i32, value_len: i32| {
            edit(caller, (kind, name, name_len), Some((value, value_len)), Op::Set)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "add_header_value",
        |caller: Caller<'_, Ctx>, kind: i32, name: i32, name_len: i32, value: i32, value_len: i32| {
            edit(caller, (kind, name, name_len), Some((value, value_len)), Op::Add)
        },
    )?;
    linker.func_wrap(MODULE, "remove_header", |caller: Caller<'_, Ctx>, kind: i32, name: i32, name_len: i32| {
        edit(caller, (kind, name, name_len), None, Op::Remove)
    })?;
    Ok(())
}

/// host-go traps on an empty header name before anything else.
fn header_name(caller: &mut Caller<'_, Ctx>, ptr: i32, len: i32) -> wasmtime::Result<String> {
    if len == 0 {
        return Err(wasmtime::Error::msg("HTTP header name cannot be empty"));
    }
    read_string(caller, "name", ptr, len)
}

#[derive(Clone, Copy)]
enum Op {
    Set,
    Add,
    Remove,
}

/// set/add/remove, in host-go's order: empty name, kind and guard, then memory reads.
fn edit(
    mut caller: Caller<'_, Ctx>,
    (kind, name, name_len): (i32, i32, i32),
    value: Option<(i32, i32)>,
    op: Op,
) -> wasmtime::Result<()> {
    if name_len == 0 {
        return Err(wasmtime::Error::msg("HTTP header name cannot be empty"));
    }
    let kind = Kind::of(kind)?;
    let verb = match op {
        Op::Set => "set",
        Op::Add => "add",
        Op::Remove => "remove",
    };
    must_be_mutable(request(&mut caller)?, verb, kind)?;
    let name = read_string(&mut caller, "name", name, name_len)?;
    let value = match value {
        Some((ptr, len)) => read(&mut caller, "value", ptr, len)?,
        None => Vec::new(),
    };
    let s = request(&mut caller)?;
    let (header, key) = match kind {
        Kind::Request => (&mut s.header, name),
        Kind::Response => (&mut s.response.header, name),
        _ => (&mut s.response.header, format!("{TRAILER_PREFIX}{name}")),
    };
    match op {
        // host-go's addTrailer calls Set.
        Op::Add if !kind.is_trailers() => header.add(&key, &value),
        Op::Set | Op::Add => header.set(&key, &value),
        Op::Remove => header.remove(&key),
    }
    Ok(())
}
