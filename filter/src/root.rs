//! Root context: owns the parsed plugin configuration and the per-VM request sequence, and
//! creates one [`Stream`] per HTTP request.

use std::cell::Cell;
use std::rc::Rc;

use ferrogate_core::plugin::{PluginConfig, PluginConfigError};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use crate::http::Stream;

/// Plugin-wide state, one per VM and plugin.
#[derive(Default)]
pub(crate) struct Root {
    plugin: Option<Rc<PluginConfig>>,
    /// Shared with streams: drives round-robin choices and request-id generation.
    seq: Rc<Cell<u64>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let Some(bytes) = self.get_plugin_configuration() else {
            log::error!(
                "no plugin configuration (expected JSON with \"config\" or \"sidecar_cluster\")"
            );
            return false;
        };
        match PluginConfig::from_json_slice(&bytes) {
            Ok(plugin) => {
                log_loaded(&plugin);
                self.plugin = Some(Rc::new(plugin));
                true
            }
            Err(PluginConfigError::Invalid(e)) => {
                for problem in &e.problems {
                    log::error!("plugin configuration: {problem}");
                }
                false
            }
            Err(e) => {
                log::error!("{e}");
                false
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream::new(
            context_id,
            self.plugin.clone(),
            Rc::clone(&self.seq),
        )))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

fn log_loaded(plugin: &PluginConfig) {
    let Some(config) = &plugin.config else {
        log::info!("configured without inline config; waiting for a sidecar snapshot");
        return;
    };
    log::info!(
        "configured: {} providers, {} models, {} aliases, body limit {} bytes",
        config.providers.len(),
        config.models.len(),
        config.aliases.len(),
        plugin.max_body_bytes
    );
    if !config.keys.is_empty() {
        // Be explicit rather than silently open: key checks arrive with the sidecar work.
        log::warn!(
            "{} keys configured but this filter build does not enforce keys yet",
            config.keys.len()
        );
    } else {
        log::warn!("no keys configured: the gateway is OPEN to any caller");
    }
}
