//! The configuration and plugin-configuration loaders: any bytes give a config or errors,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ferrogate_core::config::Config::from_json_slice(data);
    let _ = ferrogate_core::plugin::PluginConfig::from_json_slice(data);
});
