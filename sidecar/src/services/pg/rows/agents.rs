//! MCP servers and A2A agents as rows: the entry as the config file writes it in `spec`
//! (JSONB, so a field added to the entry needs no migration), its credential apart in
//! `api_key_sealed` (sealed by the store before it gets here, as for providers).

use deadpool_postgres::GenericClient;
use ferrogate_core::config::a2a::RawA2aAgent;
use ferrogate_core::config::mcp::RawMcpServer;
use ferrogate_core::config::RawConfig;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::super::StoreError;

/// Appends the `mcp_servers` and `a2a_agents` rows to `raw` (credentials still sealed).
pub(super) async fn read(c: &impl GenericClient, raw: &mut RawConfig) -> Result<(), StoreError> {
    for (spec, sealed) in rows(c, "fg_mcp_servers").await? {
        let server: RawMcpServer = entry("mcp_servers", spec)?;
        raw.mcp_servers.push(RawMcpServer { api_key: sealed, ..server });
    }
    for (spec, sealed) in rows(c, "fg_a2a_agents").await? {
        let agent: RawA2aAgent = entry("a2a_agents", spec)?;
        raw.a2a_agents.push(RawA2aAgent { api_key: sealed, ..agent });
    }
    Ok(())
}

async fn rows(c: &impl GenericClient, table: &str) -> Result<Vec<(Value, Option<String>)>, StoreError> {
    let sql = format!("SELECT spec, api_key_sealed FROM {table} ORDER BY name");
    Ok(c.query(sql.as_str(), &[]).await?.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// A stored `spec` read back; one this build cannot read (written by a newer one) is named.
fn entry<T: DeserializeOwned>(section: &str, spec: Value) -> Result<T, StoreError> {
    let name = spec.get("name").and_then(Value::as_str).unwrap_or("?").to_string();
    serde_json::from_value(spec)
        .map_err(|e| StoreError::Unreadable { row: format!("{section}/{name}"), message: e.to_string() })
}

/// Inserts an MCP server row (its `api_key` already sealed).
pub(super) async fn insert_mcp(c: &impl GenericClient, s: &RawMcpServer) -> Result<(), tokio_postgres::Error> {
    let spec = RawMcpServer { api_key: None, ..s.clone() };
    insert(c, "fg_mcp_servers", &s.name, &spec, s.api_key.as_ref()).await
}

/// Inserts an A2A agent row (its `api_key` already sealed).
pub(super) async fn insert_a2a(c: &impl GenericClient, a: &RawA2aAgent) -> Result<(), tokio_postgres::Error> {
    let spec = RawA2aAgent { api_key: None, ..a.clone() };
    insert(c, "fg_a2a_agents", &a.name, &spec, a.api_key.as_ref()).await
}

async fn insert(
    c: &impl GenericClient,
    table: &str,
    name: &String,
    spec: &impl Serialize,
    sealed: Option<&String>,
) -> Result<(), tokio_postgres::Error> {
    // Serializing a raw entry (strings, options, a nested struct) cannot fail.
    let spec = serde_json::to_value(spec).unwrap_or(Value::Null);
    let sql = format!("INSERT INTO {table} (name, spec, api_key_sealed) VALUES ($1, $2, $3)");
    c.execute(sql.as_str(), &[name, &spec, &sealed]).await.map(drop)
}

#[cfg(test)]
#[path = "agents_tests.rs"]
mod tests;
