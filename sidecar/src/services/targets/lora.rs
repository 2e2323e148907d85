//! The LoRA adapters an engine reports, for `lora_aware` routing: vLLM's
//! `vllm:lora_requests_info` gauge.
//!
//! vLLM sets that gauge to the current Unix time under a label set naming its state:
//! `max_lora` (its `--max-loras`), `running_lora_adapters` and `waiting_lora_adapters` (the
//! adapters of its running and queued requests, comma-separated, empty when none). Every change
//! adds a label set and the old ones stay on the page, so the sample with the largest value is
//! the current state; with several engines behind one endpoint (an `engine` label, data
//! parallel) each engine's latest counts and their adapters are joined. Label values are read
//! unescaped by [`super::prom`]; names are trimmed, empty ones skipped, each kept once.

use super::prom::{samples, Sample};

/// The gauge carrying an engine's adapter state.
pub const LORA_INFO: &str = "vllm:lora_requests_info";
/// At most this many adapters are kept per endpoint (a page is untrusted input).
pub const MAX_ADAPTERS: usize = 64;
/// Longer adapter names are skipped (a served name is a short identifier).
pub const MAX_NAME_BYTES: usize = 256;

/// What an engine reports of its adapters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lora {
    /// Adapters in use: running ones first, then waiting ones, each once.
    pub adapters: Vec<String>,
    /// How many adapters the engine keeps loaded (`max_lora`), when it says.
    pub max_loras: Option<u32>,
}

/// Reads the adapter state of `text`; `None` when the page has no [`LORA_INFO`] sample.
pub fn read(text: &str) -> Option<Lora> {
    let mut latest: Vec<(String, f64, Sample<'_>)> = Vec::new();
    for s in samples(text).filter(|s| s.name == LORA_INFO && !s.value.is_nan()) {
        let engine = label(&s, "engine").unwrap_or_default().to_owned();
        match latest.iter_mut().find(|(e, _, _)| *e == engine) {
            // Equal values: the later line wins (a page lists in insertion order).
            Some(entry) if s.value >= entry.1 => *entry = (engine, s.value, s),
            Some(_) => {}
            None => latest.push((engine, s.value, s)),
        }
    }
    if latest.is_empty() {
        return None;
    }
    let mut lora = Lora::default();
    for (_, _, s) in &latest {
        let max = label(s, "max_lora").and_then(|m| m.trim().parse::<u32>().ok());
        lora.max_loras = match (lora.max_loras, max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for key in ["running_lora_adapters", "waiting_lora_adapters"] {
            add_names(&mut lora.adapters, label(s, key).unwrap_or_default());
        }
    }
    Some(lora)
}

/// The value of label `name`, if the sample has it.
fn label<'s>(sample: &'s Sample<'_>, name: &str) -> Option<&'s str> {
    sample.labels.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

/// Adds the comma-separated names of `list` not yet in `out`, up to [`MAX_ADAPTERS`].
fn add_names(out: &mut Vec<String>, list: &str) {
    for name in list.split(',').map(str::trim) {
        if out.len() >= MAX_ADAPTERS {
            return;
        }
        if !name.is_empty() && name.len() <= MAX_NAME_BYTES && !out.iter().any(|a| a == name) {
            out.push(name.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vLLM page after three state changes: the latest (largest value) is the middle line.
    const PAGE: &str = r#"# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7540219e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters="summ"} 1.7540231e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7540225e+09
vllm:num_requests_running{model_name="base"} 3.0
"#;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_latest_sample_names_running_then_waiting_adapters() {
        let lora = read(PAGE).unwrap();
        assert_eq!(lora, Lora { adapters: names(&["sql-lora", "chat-lora", "summ"]), max_loras: Some(2) });
    }

    #[test]
    fn a_page_without_the_gauge_reports_nothing_and_an_idle_engine_no_adapters() {
        assert_eq!(read("vllm:num_requests_running{model_name=\"m\"} 1\n"), None);
        assert_eq!(read(""), None);
        let idle = "vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 5\n";
        assert_eq!(read(idle), Some(Lora { adapters: vec![], max_loras: Some(1) }));
    }

    #[test]
    fn label_values_are_unescaped_trimmed_and_deduplicated() {
        let page = concat!(
            r#"vllm:lora_requests_info{waiting_lora_adapters="a, b ,,a",running_lora_adapters="q\"uote,b\\s",max_lora=" 3 "} 9"#,
            "\n"
        );
        let lora = read(page).unwrap();
        assert_eq!(lora.adapters, names(&["q\"uote", "b\\s", "a", "b"]));
        assert_eq!(lora.max_loras, Some(3));
        // No max_lora, or a bad one: unknown capacity; labels in any order, missing ones empty.
        let page = "vllm:lora_requests_info{running_lora_adapters=\"x\",max_lora=\"many\"} 1\n";
        assert_eq!(read(page), Some(Lora { adapters: names(&["x"]), max_loras: None }));
    }

    #[test]
    fn several_engines_join_their_latest_states() {
        let page = concat!(
            "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"old\"} 1\n",
            "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"a\"} 2\n",
            "vllm:lora_requests_info{engine=\"1\",max_lora=\"1\",running_lora_adapters=\"b\"} 1\n",
        );
        assert_eq!(read(page), Some(Lora { adapters: names(&["a", "b"]), max_loras: Some(1) }));
    }

    #[test]
    fn hostile_pages_are_bounded_and_never_panic() {
        let many: Vec<String> = (0..500).map(|i| format!("a{i}")).collect();
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let page = format!("vllm:lora_requests_info{{running_lora_adapters=\"{long},{}\"}} 1\n", many.join(","));
        let lora = read(&page).unwrap();
        assert_eq!(lora.adapters.len(), MAX_ADAPTERS);
        assert_eq!(lora.adapters[0], "a0", "the overlong name is skipped");
        for junk in
            ["vllm:lora_requests_info{running_lora_adapters=\"a} 1", "vllm:lora_requests_info NaN", "\u{0}\u{ff}"]
        {
            assert_eq!(read(junk), None, "{junk:?}");
        }
    }
}
