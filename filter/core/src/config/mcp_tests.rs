use crate::auth::Caller;
use crate::config::{Config, RawConfig};

fn config(yaml: &str) -> Result<Config, Vec<String>> {
    let raw: RawConfig = serde_saphyr::from_str(yaml).map_err(|e| vec![e.to_string()])?;
    Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
}

const SERVERS: &str = "
mcp_servers:
  - {name: tools, url: 'http://127.0.0.1:9100/mcp', api_key: tok}
  - {name: files, url: 'https://files.example:8443/v1/mcp', auth: header, auth_header: X-Api-Key, api_key: k2}
  - {name: open, url: 'http://10.0.0.1/mcp', auth: none, transport: sse}
groups:
  - {name: team, mcp: ['files']}
keys:
  - {name: a, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', mcp: ['tools/echo', 'tools/add*']}
  - {name: b, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000002', groups: [team]}
  - {name: c, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000003', mcp: ['*']}
  - {name: d, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000004'}
  - {name: e, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000005', mcp: ['tools/echo', 'tools/*']}
";

#[test]
fn servers_are_indexed_with_their_credentials() {
    let c = config(SERVERS).unwrap();
    let (i, tools) = c.mcp.get("tools").unwrap();
    assert_eq!(i, 0);
    assert_eq!((tools.cluster.as_str(), tools.authority.as_str()), ("mcp:tools", "127.0.0.1:9100"));
    assert_eq!(tools.url.path_prefix, "/mcp");
    let cred = tools.credential.clone().unwrap();
    assert_eq!((cred.name.as_str(), cred.value.as_str()), ("authorization", "Bearer tok"));
    let (_, files) = c.mcp.get("files").unwrap();
    let cred = files.credential.clone().unwrap();
    assert_eq!((cred.name.as_str(), cred.value.as_str()), ("x-api-key", "k2"));
    let (_, open) = c.mcp.get("open").unwrap();
    assert_eq!((open.credential.is_none(), open.transport), (true, super::Transport::Sse));
    assert!(!format!("{c:?}").contains("Bearer tok"), "Debug must redact credentials");
    assert!(c.mcp.get("nope").is_none());
}

#[test]
fn grants_cover_servers_and_tool_globs() {
    let c = config(SERVERS).unwrap();
    let access = |key: usize, server: usize| c.mcp_access(Caller::Key(key), server);
    let a = access(0, 0).unwrap();
    assert!(a.allows("echo") && a.allows("add") && a.allows("add_many"));
    assert!(!a.allows("delete_everything") && !a.is_all());
    assert!(access(0, 1).is_none(), "key a has no grant on files");
    assert!(access(1, 1).unwrap().is_all(), "key b reaches files through its group");
    assert!(access(1, 0).is_none());
    assert!(access(2, 2).unwrap().is_all(), "'*' covers every server");
    assert!(access(3, 0).is_none(), "no pattern: no server");
    assert!(access(4, 0).unwrap().is_all(), "tools/* wins over a narrower pattern of the same server");
    assert!(c.mcp_access(Caller::Open, 0).is_none(), "Open grants nothing under a keyed config");
    let open = config("mcp_servers: [{name: s, url: 'http://h/mcp'}]").unwrap();
    assert!(open.mcp_access(Caller::Open, 0).unwrap().is_all(), "no keys: every tool");
}

#[test]
fn bad_servers_and_grants_are_reported_with_their_paths() {
    let yaml = "
mcp_servers:
  - {name: Bad_Name, url: 'ftp://h'}
  - {name: ok, url: 'http://h/mcp', transport: websocket, auth: basic}
  - {name: ok, url: 'http://h/mcp'}
  - {name: h, url: 'http://h/mcp', auth: header}
  - {name: i, url: 'http://h/mcp', auth: header, auth_header: 'mcp-session-id'}
  - {name: j, url: 'http://h/mcp', auth_header: x-key, api_key_env: 'NOT A VAR'}
  - {name: k, url: 'http://h/mcp', api_key: 'has space'}
keys:
  - {name: a, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', mcp: ['ghost', 'ok/']}
";
    let problems = config(yaml).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "mcp_servers[0].name",
            "mcp_servers[0].url",
            "mcp_servers[1].transport",
            "mcp_servers[1].auth",
            "mcp_servers[2].name",
            "mcp_servers[3].auth_header",
            "mcp_servers[4].auth_header",
            "mcp_servers[5].api_key_env",
            "mcp_servers[5].auth_header",
            "mcp_servers[6].api_key",
            "keys[0].mcp[0]",
            "keys[0].mcp[1]",
        ],
        "{problems:#?}"
    );
    assert!(!problems.iter().any(|p| p.contains("has space")), "a credential is never echoed");
}

#[test]
fn unknown_keys_in_a_server_are_refused() {
    let problems = config("mcp_servers: [{name: s, url: 'http://h/mcp', token: x}]").unwrap_err();
    assert!(problems[0].contains("token"), "{problems:?}");
}

#[test]
fn api_key_env_fills_the_credential() {
    let mut raw: RawConfig =
        serde_saphyr::from_str("mcp_servers: [{name: s, url: 'http://h/mcp', api_key_env: T}]").unwrap();
    raw.resolve_api_keys(|var| (var == "T").then(|| "from-env".to_string()));
    let c = Config::try_from(raw).unwrap();
    let cred = c.mcp.items[0].credential.clone().unwrap();
    assert_eq!(cred.value, "Bearer from-env");
}

#[test]
fn oauth_servers_need_their_block_and_keep_the_secret_out() {
    let yaml = "
mcp_servers:
  - name: s
    url: 'http://h:9/mcp'
    auth: oauth_client_credentials
    oauth: {token_url: 'http://idp:8/token', client_id: gw, client_secret_env: S_SECRET, scope: 'a b'}
";
    let c = config(yaml).unwrap();
    let oauth = c.mcp.items[0].oauth.clone().unwrap();
    assert_eq!((oauth.resource.as_str(), oauth.scope.as_deref()), ("http://h:9/mcp", Some("a b")));
    assert!(c.mcp.items[0].credential.is_none(), "no token fetched yet");
    let mut raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    raw.mcp_servers[0].api_key = Some("tok-1".into());
    let c = Config::try_from(raw).unwrap();
    assert_eq!(c.mcp.items[0].credential.clone().unwrap().value, "Bearer tok-1", "the fetched token is sent");
    let bad = "
mcp_servers:
  - {name: a, url: 'http://h/mcp', auth: oauth_client_credentials}
  - {name: b, url: 'http://h/mcp', oauth: {token_url: 'http://i/t', client_id: c, client_secret_env: S}}
  - name: c
    url: 'http://h/mcp'
    auth: oauth_client_credentials
    api_key_env: K
    oauth: {token_url: 'idp/token', client_id: '', client_secret_env: 'bad var'}
";
    let problems = config(bad).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "mcp_servers[0].oauth",
            "mcp_servers[1].oauth",
            "mcp_servers[2].oauth.token_url",
            "mcp_servers[2].oauth.client_secret_env",
            "mcp_servers[2].oauth.client_id",
            "mcp_servers[2].api_key_env",
        ],
        "{problems:#?}"
    );
}

#[test]
fn servers_and_agents_take_a_timeout_within_bounds() {
    let c = config(
        "
mcp_servers:
  - {name: slow, url: 'http://h/mcp', timeout_ms: 30000}
  - {name: plain, url: 'http://h/mcp'}
a2a_agents:
  - {name: agent, url: 'http://h/', timeout_ms: 3600000}
",
    )
    .unwrap();
    assert_eq!(c.mcp.get("slow").unwrap().1.timeout_ms, Some(30_000));
    assert_eq!(c.mcp.get("plain").unwrap().1.timeout_ms, None, "absent: the route timeout applies");
    assert_eq!(c.a2a.get("agent").unwrap().1.timeout_ms, Some(3_600_000));
    let problems = config(
        "
mcp_servers: [{name: a, url: 'http://h/mcp', timeout_ms: 0}]
a2a_agents: [{name: b, url: 'http://h/', timeout_ms: 3600001}]
",
    )
    .unwrap_err();
    assert_eq!(
        problems,
        [
            "mcp_servers[0].timeout_ms: 0 is not between 1 and 3600000 ms",
            "a2a_agents[0].timeout_ms: 3600001 is not between 1 and 3600000 ms"
        ]
    );
}
