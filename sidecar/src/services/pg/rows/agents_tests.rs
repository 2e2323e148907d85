//! MCP servers and A2A agents in the Postgres store: sealed at rest, never listed, grants of
//! keys and groups kept, and a server a grant names cannot be deleted from under it.

use ferrogate_core::config::a2a::RawA2aAgent;
use ferrogate_core::config::mcp::RawMcpServer;
use ferrogate_core::config::{RawGroup, RawKey};

use crate::services::pg::tests::{master, Schema};
use crate::services::pg::{Change, PgStore, Resource, Section, StoreError};

const DIGEST: &str = "sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c";

fn server(name: &str, key: Option<&str>) -> Change {
    Change::Create(Resource::McpServer(RawMcpServer {
        name: name.into(),
        url: "http://127.0.0.1:9000/mcp".into(),
        transport: Some("sse".into()),
        auth: Some("header".into()),
        auth_header: Some("x-api-key".into()),
        api_key: key.map(String::from),
        ..RawMcpServer::default()
    }))
}

fn agent(name: &str, key: Option<&str>) -> Change {
    Change::Create(Resource::A2aAgent(RawA2aAgent {
        name: name.into(),
        url: "http://127.0.0.1:9001/".into(),
        api_key: key.map(String::from),
        ..RawA2aAgent::default()
    }))
}

fn key(mcp: &[&str], a2a: &[&str]) -> Change {
    Change::Create(Resource::Key(RawKey {
        name: "agent-key".into(),
        digest: DIGEST.into(),
        groups: vec!["agents".into()],
        mcp: mcp.iter().map(|s| s.to_string()).collect(),
        a2a: a2a.iter().map(|s| s.to_string()).collect(),
        ..RawKey::default()
    }))
}

fn group() -> Change {
    Change::Create(Resource::Group(RawGroup {
        name: "agents".into(),
        mcp: vec!["tools/search_*".into()],
        a2a: vec!["*".into()],
        ..RawGroup::default()
    }))
}

#[tokio::test]
async fn servers_and_agents_round_trip_sealed_with_the_grants_that_name_them() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, Some(master())).await.unwrap();
    for change in [server("tools", Some("sk-mcp-secret")), agent("helper", Some("sk-a2a-secret")), group()] {
        store.write(change).await.unwrap();
    }
    store.write(key(&["tools/*"], &["helper"])).await.unwrap();
    let (_, raw) = store.load().await.unwrap();
    let tools = &raw.mcp_servers[0];
    assert_eq!((tools.api_key.as_deref(), tools.transport.as_deref()), (Some("sk-mcp-secret"), Some("sse")));
    assert_eq!(tools.auth_header.as_deref(), Some("x-api-key"));
    assert_eq!(raw.a2a_agents[0].api_key.as_deref(), Some("sk-a2a-secret"));
    assert_eq!(
        (raw.keys[0].mcp.as_slice(), raw.keys[0].a2a.as_slice()),
        (&["tools/*".into()][..], &["helper".into()][..])
    );
    assert_eq!(raw.groups[0].mcp, ["tools/search_*"]);
    // At rest: sealed, bound to the row; listed: never, in either form.
    let db = store.pool.get().await.unwrap();
    for (table, plain) in [("fg_mcp_servers", "sk-mcp-secret"), ("fg_a2a_agents", "sk-a2a-secret")] {
        let row = db.query_one(&format!("SELECT spec::text, api_key_sealed FROM {table}"), &[]).await.unwrap();
        let (spec, sealed): (String, String) = (row.get(0), row.get(1));
        assert!(sealed.starts_with("fgs1:") && !sealed.contains(plain) && !spec.contains(plain), "{spec}");
    }
    for section in [Section::McpServers, Section::A2aAgents] {
        let listed = store.list(section).await.unwrap();
        assert_eq!(listed[0]["api_key_set"], true, "{listed}");
        assert!(!listed.to_string().contains("secret") && !listed.to_string().contains("fgs1:"), "{listed}");
    }
}

#[tokio::test]
async fn a_sealed_credential_moved_to_another_row_does_not_open() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, Some(master())).await.unwrap();
    store.write(server("tools", Some("sk-mcp-secret"))).await.unwrap();
    store.write(server("other", None)).await.unwrap();
    let db = store.pool.get().await.unwrap();
    let moved = "UPDATE fg_mcp_servers SET api_key_sealed = (SELECT api_key_sealed FROM fg_mcp_servers WHERE name = 'tools') WHERE name = 'other'";
    db.execute(moved, &[]).await.unwrap();
    match store.load().await {
        Err(StoreError::Secret { row, .. }) => assert_eq!(row, "mcp_servers/other"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_or_agent_a_grant_names_cannot_be_deleted_and_a_bad_one_is_refused() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    store.write(server("tools", None)).await.unwrap();
    store.write(agent("helper", None)).await.unwrap();
    store.write(group()).await.unwrap();
    store.write(key(&["tools/*"], &["helper"])).await.unwrap();
    // The group grants tools/search_* and every agent (`*`, which names none).
    let named = [
        (Section::McpServers, "tools", "groups/agents, keys/agent-key"),
        (Section::A2aAgents, "helper", "keys/agent-key"),
    ];
    for (section, name, dependents) in named {
        match store.write(Change::Delete(section, name.into())).await {
            Err(StoreError::Conflict(msg)) => assert!(msg.ends_with(&format!("servable: {dependents}")), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
    let ftp = Change::Create(Resource::McpServer(RawMcpServer {
        name: "bad".into(),
        url: "ftp://127.0.0.1/mcp".into(),
        ..RawMcpServer::default()
    }));
    match store.write(ftp).await {
        Err(StoreError::Invalid(problems)) => assert_eq!(problems[0].path, "mcp_servers[0].url", "{problems:?}"),
        other => panic!("{other:?}"),
    }
    // A key granting an unknown server is its own problem (400), not another row's.
    store.write(Change::Delete(Section::Keys, "agent-key".into())).await.unwrap();
    match store.write(key(&["nowhere/*"], &[])).await {
        Err(StoreError::Invalid(problems)) => assert_eq!(problems[0].path, "keys[0].mcp[0]", "{problems:?}"),
        other => panic!("{other:?}"),
    }
    // The group still grants tools/search_*: the server goes once nothing names it.
    store.write(Change::Delete(Section::Groups, "agents".into())).await.unwrap();
    store.write(Change::Delete(Section::McpServers, "tools".into())).await.unwrap();
    assert!(matches!(
        store.write(Change::Delete(Section::McpServers, "tools".into())).await,
        Err(StoreError::NotFound(_))
    ));
}
