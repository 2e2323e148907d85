//! The Runtime: compiled module, linker and process-wide state shared by every VM built
//! from it (like one Envoy process: shared data, queues, metrics). Also owns the epoch
//! ticker that makes per-callback deadlines work.

use crate::metrics::Registry;
use crate::state::HostState;
use crate::{abi, HostError, PluginSpec, Shared, Vm};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use wasmtime::{Config, Engine, InstancePre, Linker, Module};

/// Epoch length: deadlines are counted in ticks of this period.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// State shared by every VM of one Runtime.
pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    pub(crate) pre: InstancePre<HostState>,
    pub(crate) spec: PluginSpec,
    pub(crate) shared: Shared,
    pub(crate) metrics: Registry,
    next_vm: AtomicU64,
}

impl RuntimeInner {
    /// A process-unique VM number (queue notification target).
    pub(crate) fn next_vm_uid(&self) -> u64 {
        self.next_vm.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Compiled module + spec + state shared by every VM (like one Envoy process).
/// Cheap to clone (Arc inside).
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

fn module_err(e: impl std::fmt::Display) -> HostError {
    HostError::Module(e.to_string())
}

impl Runtime {
    /// Compiles the module once, links every import, and starts the epoch ticker thread
    /// (it stops once the last Runtime clone and every VM are dropped).
    pub fn new(wasm: &[u8], spec: PluginSpec) -> Result<Runtime, HostError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        // `FERROGATE_WASM_PROFILER=perfmap` names the guest's compiled functions for `perf`
        // (/tmp/perf-<pid>.map), so a profile shows filter code instead of anonymous JIT.
        if std::env::var_os("FERROGATE_WASM_PROFILER").is_some_and(|v| v == "perfmap") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(module_err)?;
        let module = Module::new(&engine, wasm).map_err(module_err)?;
        let mut linker = Linker::new(&engine);
        abi::add_to_linker(&mut linker).map_err(module_err)?;
        // Imports we do not know trap when called, instead of failing instantiation.
        linker.define_unknown_imports_as_traps(&module).map_err(module_err)?;
        let pre = linker.instantiate_pre(&module).map_err(module_err)?;
        let inner = Arc::new(RuntimeInner {
            engine,
            pre,
            spec,
            shared: Shared::default(),
            metrics: Registry::default(),
            next_vm: AtomicU64::new(0),
        });
        start_ticker(Arc::downgrade(&inner))?;
        Ok(Runtime { inner })
    }

    /// The plugin settings this Runtime was built with.
    pub fn spec(&self) -> &PluginSpec {
        &self.inner.spec
    }

    /// Start a VM: instantiate, `_initialize`, root context 1 created, on_vm_start,
    /// on_configure. A false return -> [`HostError::ConfigRejected`]. `worker` is an index
    /// used for logs / queue targets.
    pub fn new_vm(&self, worker: usize) -> Result<Vm, HostError> {
        Vm::start(self.inner.clone(), worker)
    }

    /// Process-wide shared data and queues.
    pub fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Prometheus exposition text of all guest-defined metrics (Envoy naming: name
    /// sanitized to [a-zA-Z0-9_], no prefix; counters `# TYPE x counter`, gauges,
    /// histograms with Envoy's default buckets).
    pub fn prometheus_text(&self) -> String {
        self.inner.metrics.prometheus_text()
    }

    /// Sets the tag extraction applied when metrics are exported, as Envoy's bootstrap
    /// `stats_config.stats_tags` does (none by default: dimensions stay in the names).
    pub fn set_stats_tags(&self, tags: Vec<crate::TagSpecifier>) {
        self.inner.metrics.set_tags(tags);
    }

    /// The guest-defined metrics grouped into Prometheus families after tag extraction.
    pub fn metric_families(&self) -> Vec<crate::MetricFamily> {
        self.inner.metrics.families()
    }
}

/// Advances the engine epoch every [`EPOCH_TICK`]; holds only a Weak so it ends by itself.
fn start_ticker(weak: Weak<RuntimeInner>) -> Result<(), HostError> {
    std::thread::Builder::new()
        .name("ferrogate-wasm-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(rt) => rt.engine.increment_epoch(),
                None => break,
            }
        })
        .map(|_| ())
        .map_err(module_err)
}
