//! Guardrail policies as rows: the policy as the config file writes it, without its name, in
//! `spec` (JSONB, so a field added to a policy or a rule needs no migration); the name is the
//! row's key. The `guardrails` lists of models, groups and keys are columns of their rows.

use deadpool_postgres::GenericClient;
use ferrogate_core::config::guardrails::RawGuardrail;
use ferrogate_core::config::RawConfig;
use serde_json::Value;

use super::super::StoreError;

/// Appends the `guardrails` rows to `raw`, by name.
pub(super) async fn read(c: &impl GenericClient, raw: &mut RawConfig) -> Result<(), StoreError> {
    for r in c.query("SELECT name, spec FROM fg_guardrails ORDER BY name", &[]).await? {
        let (name, spec): (String, Value) = (r.get(0), r.get(1));
        raw.guardrails.push(policy(name, spec)?);
    }
    Ok(())
}

/// A stored policy read back under its row's name; one this build cannot read (written by a
/// newer one) is named.
fn policy(name: String, mut spec: Value) -> Result<RawGuardrail, StoreError> {
    let unreadable = |message: String| StoreError::Unreadable { row: format!("guardrails/{name}"), message };
    let Some(fields) = spec.as_object_mut() else { return Err(unreadable("not a JSON object".into())) };
    fields.insert("name".into(), Value::String(name.clone()));
    serde_json::from_value(spec).map_err(|e| unreadable(e.to_string()))
}

/// Inserts a policy row.
pub(super) async fn insert(c: &impl GenericClient, g: &RawGuardrail) -> Result<(), tokio_postgres::Error> {
    // Serializing a raw policy (strings, numbers, lists) cannot fail.
    let mut spec = serde_json::to_value(g).unwrap_or_else(|_| Value::Object(serde_json::Map::new()));
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("name");
    }
    c.execute("INSERT INTO fg_guardrails (name, spec) VALUES ($1, $2)", &[&g.name, &spec]).await.map(drop)
}

#[cfg(test)]
#[path = "guardrails_tests.rs"]
mod tests;
