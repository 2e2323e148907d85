use super::*;

/// A vLLM 0.10 `/metrics` page, abridged (one engine, data parallel rank 0, process metrics,
/// a histogram and counters with their `_created` samples).
const VLLM: &str = r#"# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 13817.0
process_virtual_memory_bytes 4.1870917632e+010
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.41234
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.99
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 52816.0
vllm:prefix_cache_queries_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7540219e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 41.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0421
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="27592"} 1.0
"#;

/// An SGLang 0.4 `/metrics` page, abridged.
const SGLANG: &str = r#"# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 5.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 8123.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.07
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 312.5
"#;

#[test]
fn vllm_load_prefers_the_new_kv_series() {
    let load = load(VLLM);
    assert_eq!(load, Load { running: Some(3.0), waiting: Some(2.0), kv_usage: Some(0.41234) });
    let old_only = VLLM.replace("vllm:kv_cache_usage_perc{", "vllm:other{");
    assert_eq!(super::load(&old_only).kv_usage, Some(0.99), "older vLLM: gpu_cache_usage_perc");
}

#[test]
fn sglang_load() {
    assert_eq!(load(SGLANG), Load { running: Some(5.0), waiting: Some(1.0), kv_usage: Some(0.07) });
}

#[test]
fn several_models_and_engines_sum_counts_and_take_the_fullest_cache() {
    let text = "vllm:num_requests_running{model_name=\"a\"} 2\nvllm:num_requests_running{model_name=\"b\"} 3\n\
                vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"1\"} 4\n\
                vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\nvllm:kv_cache_usage_perc{model_name=\"b\"} 0.75\n";
    assert_eq!(load(text), Load { running: Some(5.0), waiting: Some(5.0), kv_usage: Some(0.75) });
}

#[test]
fn pages_without_engine_series_have_no_load() {
    assert!(load("").is_empty());
    assert!(load("# only\n# comments\nprocess_cpu_seconds_total 12.5\n").is_empty());
    assert!(load("<html><body>404 Not Found</body></html>").is_empty());
    let bad = "vllm:num_requests_running{model_name=\"a\"} NaN\nvllm:num_requests_waiting -3\n";
    assert!(load(bad).is_empty(), "non-finite and negative values are ignored");
}

#[test]
fn samples_unescape_labels_and_skip_malformed_lines() {
    let text = "m{a=\"x\\\"}y\",b=\"1\\\\2\\n\"} 1.5 1712345678000\n\
                m{a=\"unterminated} 1\n\
                m{=\"x\"} 1\n\
                m{a=x} 1\n\
                9bad 1\n\
                m 1 2 3\n\
                m{a=\"1\",} +Inf\n\
                m  \n\
                m{a=\"1\"}NaNx\n\
                m{ a = \"sp\" } -2e-3\n";
    let got: Vec<Sample<'_>> = samples(text).collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0].labels, [("a", "x\"}y".to_string()), ("b", "1\\2\n".to_string())]);
    assert_eq!(got[0].value, 1.5);
    assert_eq!((got[1].labels.len(), got[1].value), (0, 1.0), "a timestamp-like tail is ignored");
    assert_eq!(got[2].value, f64::INFINITY);
    assert_eq!((got[3].labels[0].1.as_str(), got[3].value), ("sp", -0.002));
}

#[test]
fn junk_never_panics() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let alphabet = b"vllm:_num{}=\",\\ \n#0123456789.eE+-InfNa\xff";
    for _ in 0..2_000 {
        let len = rng.random_range(0..200);
        let bytes: Vec<u8> = (0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect();
        let text = String::from_utf8_lossy(&bytes);
        let _ = load(&text);
        let _ = samples(&text).count();
    }
    for line in ["{", "}", "m{", "m{a", "m{a=", "m{a=\"", "m{a=\"\\", "m{a=\"b\"", "m{a=\"b\"}", "\u{1F600}{a=\"é\"} 1"]
    {
        assert!(sample(line).is_none(), "{line:?}");
    }
}
