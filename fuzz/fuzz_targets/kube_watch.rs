//! The Kubernetes watch-line reader and the InferencePool readers (`inference_pool`): any bytes
//! as a watch line never panic; an object read from one gives at most one endpoint per target
//! port of each pod, each `host:port` with one of the pool's ports.
#![no_main]

use ferrogate_core::inference_pool::{PoolSpec, WatchLine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((line, _rv)) = WatchLine::parse(data) else { return };
    let (WatchLine::Applied(object) | WatchLine::Deleted(object)) = line else { return };
    let Ok(spec) = PoolSpec::of(&object) else {
        let spec = PoolSpec { selector: [("app".to_string(), "x".to_string())].into(), ports: vec![8000, 8001] };
        let found = spec.endpoints([&object]);
        assert!(found.len() <= 2, "one endpoint per target port: {found:?}");
        assert!(found.iter().all(|e| e.ends_with(":8000") || e.ends_with(":8001")), "{found:?}");
        return;
    };
    assert!(!spec.ports.is_empty() && !spec.selector.is_empty());
    assert!(!spec.label_selector().is_empty());
});
