//! `egress:` in the configuration: the defaults, the block read back, and every upstream URL
//! checked at its own path.

use crate::config::{Config, RawConfig};
use crate::egress::Policy;

fn config(yaml: &str) -> Result<Config, Vec<String>> {
    let raw: RawConfig = serde_saphyr::from_str(yaml).map_err(|e| vec![e.to_string()])?;
    Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
}

#[test]
fn without_a_block_link_local_addresses_alone_are_refused() {
    let c = config("providers: [{name: a, kind: openai, base_url: 'http://127.0.0.1:8000'}]").unwrap();
    assert_eq!(c.egress, Policy::default());
    assert!(c.egress.block_link_local && !c.egress.block_loopback && !c.egress.block_private);
    let problems = config("providers: [{name: a, kind: openai, base_url: 'http://169.254.169.254/latest'}]");
    assert_eq!(
        problems.unwrap_err(),
        ["providers[0].base_url: host 169.254.169.254 is blocked by egress.block_link_local"]
    );
}

#[test]
fn the_block_is_read_back() {
    let c = config(
        "egress: {block_link_local: false, block_loopback: true, block_private: true, allow_hosts: ['API.example.com', '*.svc', '10.0.0.5']}",
    )
    .unwrap();
    let want = Policy {
        block_link_local: false,
        block_loopback: true,
        block_private: true,
        allow_hosts: vec!["api.example.com".into(), "*.svc".into(), "10.0.0.5".into()],
    };
    assert_eq!(c.egress, want);
}

#[test]
fn every_upstream_url_is_checked_at_its_path() {
    let problems = config(
        "
egress: {block_loopback: true, block_private: true}
providers:
  - {name: ok, kind: openai, base_url: 'https://api.openai.com'}
  - {name: meta, kind: openai, base_url: 'http://0xa9fea9fe'}
  - {name: pool, kind: openai_compatible, base_url: 'http://pool.svc:8000', endpoints: ['10.0.0.1:8000', {address: '[::1]:8000', kv_events: 'tcp://[::1]:5557'}]}
  - {name: dns, kind: openai_compatible, base_url: 'http://pool.svc:8000', endpoints_dns: '127.1:8000'}
mcp_servers:
  - {name: tools, url: 'http://tools.svc/mcp'}
  - {name: meta, url: 'http://[::ffff:169.254.169.254]/mcp'}
  - name: secure
    url: 'https://tools.example.com/mcp'
    auth: oauth_client_credentials
    oauth: {token_url: 'http://192.168.0.9/token', client_id: c, client_secret_env: S}
a2a_agents:
  - {name: echo, url: 'http://0177.0.0.1:9999/'}
",
    )
    .unwrap_err();
    assert_eq!(
        problems,
        [
            "providers[1].base_url: host 0xa9fea9fe (169.254.169.254) is blocked by egress.block_link_local",
            "providers[2].endpoints[0]: host 10.0.0.1 is blocked by egress.block_private",
            "providers[2].endpoints[1].address: host [::1] is blocked by egress.block_loopback",
            "providers[3].endpoints_dns: host 127.1 (127.0.0.1) is blocked by egress.block_loopback",
            "mcp_servers[1].url: host [::ffff:169.254.169.254] is blocked by egress.block_link_local",
            "mcp_servers[2].oauth.token_url: host 192.168.0.9 is blocked by egress.block_private",
            "a2a_agents[0].url: host 0177.0.0.1 (127.0.0.1) is blocked by egress.block_loopback",
        ],
    );
}

#[test]
fn the_allow_list_applies_to_every_upstream() {
    let problems = config(
        "
egress: {allow_hosts: ['api.openai.com', '*.internal']}
providers:
  - {name: ok, kind: openai, base_url: 'https://api.openai.com'}
  - {name: no, kind: openai, base_url: 'https://api.openai.com.evil.net'}
mcp_servers:
  - {name: tools, url: 'http://tools.internal/mcp'}
  - {name: ip, url: 'http://10.0.0.9/mcp'}
",
    )
    .unwrap_err();
    assert_eq!(
        problems,
        [
            "providers[1].base_url: host api.openai.com.evil.net is not in egress.allow_hosts",
            "mcp_servers[1].url: host 10.0.0.9 is not in egress.allow_hosts",
        ],
    );
}

#[test]
fn bad_allow_entries_are_reported() {
    let problems = config("egress: {allow_hosts: ['*.10.0.0.1', 'a b', '', '*.', '1.2.3.4.5', 'ok.example', '[::1]']}")
        .unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.split(": ").next().unwrap()).collect();
    let want = ["egress.allow_hosts[0]", "egress.allow_hosts[1]", "egress.allow_hosts[2]", "egress.allow_hosts[3]"];
    assert_eq!(paths, [&want[..], &["egress.allow_hosts[4]"]].concat(), "{problems:#?}");
}

#[test]
fn unknown_keys_are_refused() {
    let raw: Result<RawConfig, _> = serde_json::from_str(r#"{"egress": {"block_metadata": true}}"#);
    assert!(raw.unwrap_err().to_string().contains("unknown field `block_metadata`"));
}
