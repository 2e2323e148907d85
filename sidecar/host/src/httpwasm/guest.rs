//! Compiling the guest and creating instances the way Traefik does: host-go's export checks,
//! WASI preview1 next to `http_handler`, Traefik's start functions (`_start`, then
//! `_initialize`, each when exported) run at every instantiation, and Traefik's WASI
//! settings (env allow-list, directory mounts, no stdio, real wall clock).

use std::sync::Arc;

use wasmtime::{Config, Engine, InstancePre, Linker, Module, Store, TypedFunc, ValType};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use super::error::HttpWasmError;
use super::imports;
use super::state::{Ctx, Shared};
use super::PluginSettings;

/// What every instance is made from.
pub(crate) struct Template {
    engine: Engine,
    pre: InstancePre<Ctx>,
    pub(crate) shared: Arc<Shared>,
    settings: PluginSettings,
}

/// One instance (host-go's `guest`): its own store, with the two exports.
pub(crate) struct Guest {
    pub(crate) store: Store<Ctx>,
    pub(crate) handle_request: TypedFunc<(), i64>,
    pub(crate) handle_response: TypedFunc<(i32, i32), ()>,
    /// `Some` when a start function called `proc_exit(0)`: wazero then closes the module
    /// without an error, and every later call fails with this text.
    pub(crate) closed: Option<String>,
}

impl Template {
    /// Compiles and links `wasm`; checks the exports like host-go's `compileGuest`.
    pub(crate) fn new(wasm: &[u8], settings: PluginSettings) -> Result<Template, HttpWasmError> {
        // Async calls: WASI preview1 in wasmtime-wasi is async underneath, and its sync
        // wrappers would block_on inside the caller's tokio runtime (a panic there).
        let config = Config::new();
        let engine = Engine::new(&config).map_err(|e| HttpWasmError::Compile(format!("{e:#}")))?;
        let module = Module::new(&engine, wasm).map_err(|e| HttpWasmError::Compile(format!("{e:#}")))?;
        check_exports(&module)?;
        let mut linker: Linker<Ctx> = Linker::new(&engine);
        let link = |e: wasmtime::Error| HttpWasmError::Link(format!("{e:#}"));
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |ctx: &mut Ctx| &mut ctx.wasi).map_err(link)?;
        imports::add_to_linker(&mut linker).map_err(link)?;
        let pre = linker.instantiate_pre(&module).map_err(link)?;
        // Mounts are checked now, so a bad one fails the start rather than a request.
        wasi_ctx(&settings)?;
        let shared = Arc::new(Shared { config: settings.guest_config.clone(), features: Default::default() });
        Ok(Template { engine, pre, shared, settings })
    }

    /// A new instance with its start functions run (wazero's `InstantiateModule`).
    pub(crate) async fn instantiate(&self) -> Result<Guest, HttpWasmError> {
        let fail = |e: wasmtime::Error| HttpWasmError::Instantiate(format!("{e:#}"));
        let ctx = Ctx { wasi: wasi_ctx(&self.settings)?, shared: self.shared.clone(), req: None };
        let mut store = Store::new(&self.engine, ctx);
        let instance = self.pre.instantiate_async(&mut store).await.map_err(fail)?;
        let handle_request = instance.get_typed_func::<(), i64>(&mut store, "handle_request").map_err(fail)?;
        let handle_response = instance.get_typed_func::<(i32, i32), ()>(&mut store, "handle_response").map_err(fail)?;
        let mut closed = None;
        for name in ["_start", "_initialize"] {
            let Some(start) = instance.get_func(&mut store, name) else { continue };
            let start = start.typed::<(), ()>(&store).map_err(fail)?;
            if let Err(e) = start.call_async(&mut store, ()).await {
                match e.downcast_ref::<I32Exit>() {
                    // wazero: exit code 0 is no error, but the module is closed.
                    Some(I32Exit(0)) => {
                        closed = Some("module closed with exit_code(0)".to_string());
                        break;
                    }
                    Some(I32Exit(code)) => {
                        return Err(HttpWasmError::Instantiate(format!("module closed with exit_code({code})")))
                    }
                    None => {
                        return Err(HttpWasmError::Instantiate(format!("function[{name}] failed: {}", trap_text(&e))))
                    }
                }
            }
        }
        Ok(Guest { store, handle_request, handle_response, closed })
    }
}

/// host-go `compileGuest`'s checks and messages.
fn check_exports(module: &Module) -> Result<(), HttpWasmError> {
    let func = |name: &str| module.get_export(name).and_then(|e| e.func().cloned());
    let missing = |what: &str| HttpWasmError::Exports(format!("guest doesn't export {what}"));
    let request = func("handle_request").ok_or_else(|| missing("func[handle_request]"))?;
    let results: Vec<ValType> = request.results().collect();
    if request.params().len() != 0 || results.len() != 1 || !matches!(results[0], ValType::I64) {
        return Err(HttpWasmError::Exports(
            "guest exports the wrong signature for func[handle_request]. should be () -> (i64)".into(),
        ));
    }
    let response = func("handle_response").ok_or_else(|| missing("func[handle_response]"))?;
    let params: Vec<ValType> = response.params().collect();
    let i32_pair = params.len() == 2 && params.iter().all(|p| matches!(p, ValType::I32));
    if !i32_pair || response.results().len() != 0 {
        return Err(HttpWasmError::Exports(
            "guest exports the wrong signature for func[handle_response]. should be (i32, 32) -> ()".into(),
        ));
    }
    match module.get_export("memory").and_then(|e| e.memory().cloned()) {
        Some(_) => Ok(()),
        None => Err(missing("memory[memory]")),
    }
}

/// Traefik's WASI for a plugin: env only from `envs`, preopens from `mounts`, stdio
/// discarded (wazero's defaults: empty stdin, io.Discard out), the real wall clock.
fn wasi_ctx(settings: &PluginSettings) -> Result<WasiP1Ctx, HttpWasmError> {
    let mut builder = WasiCtxBuilder::new();
    builder.stdin(std::io::empty()).stdout(std::io::empty()).stderr(std::io::empty());
    builder.envs(&settings.envs);
    for mount in &settings.mounts {
        let (host, guest, perms) = parse_mount(mount)?;
        builder
            .preopened_dir(host, guest, perms)
            .map_err(|e| HttpWasmError::Mount { mount: mount.clone(), reason: format!("{e:#}") })?;
    }
    Ok(builder.build_p1())
}

/// Traefik's mount syntax: `host`, `host:guest`, optional `:ro` suffix; more parts ⇒ error.
pub(crate) fn parse_mount(mount: &str) -> Result<(&str, &str, FsPerms), HttpWasmError> {
    let (spec, perms) = match mount.strip_suffix(":ro") {
        Some(rest) => (rest, FsPerms::ReadOnly),
        None => (mount, FsPerms::ReadWrite),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        [dir] => Ok((dir, dir, perms)),
        [host, guest] => Ok((host, guest, perms)),
        _ => Err(HttpWasmError::Mount { mount: mount.to_string(), reason: "too many ':'".into() }),
    }
}

/// wazero-like error text: the trap or host message, then the guest's stack.
pub(crate) fn trap_text(e: &wasmtime::Error) -> String {
    let mut text = format!("wasm error: {}", e.root_cause());
    if let Some(trace) = e.downcast_ref::<wasmtime::WasmBacktrace>() {
        text.push_str("\nwasm stack trace:");
        for frame in trace.frames() {
            let func = frame.func_name().unwrap_or("?");
            text.push_str(&format!("\n\t.{func}()"));
        }
    }
    text
}
