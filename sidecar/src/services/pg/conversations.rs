//! Conversations in Postgres: the `fg_conversations` table (`0010_conversations.sql`), one row
//! per (owner, id), its items a JSON array rewritten under the row's lock.

use serde_json::Value;
use tokio_postgres::Row;

use super::{PgStore, StoreError};
use crate::services::responses::conversations::Conversation;

fn bigint(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn count(row: &Row, i: usize) -> u64 {
    u64::try_from(row.get::<_, i64>(i)).unwrap_or_default()
}

const COLUMNS: &str = "created_at, metadata, items, tokens, cost_micros";

fn from_row(id: &str, row: &Row) -> Conversation {
    let json = |i: usize| serde_json::from_str::<Value>(&row.get::<_, String>(i)).unwrap_or(Value::Null);
    Conversation {
        id: id.to_string(),
        created_at: count(row, 0),
        metadata: json(1),
        items: match json(2) {
            Value::Array(items) => items,
            _ => Vec::new(),
        },
        tokens: count(row, 3),
        cost_micros: count(row, 4),
    }
}

impl PgStore {
    /// See [`crate::services::responses::ResponseStore::create_conversation`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn create_conversation(&self, owner: &str, c: &Conversation) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let (metadata, items) = (c.metadata.to_string(), Value::Array(c.items.clone()).to_string());
        let sql = "INSERT INTO fg_conversations (owner, id, created_at, metadata, items, tokens, cost_micros) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let row: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&owner, &c.id, &bigint(c.created_at), &metadata, &items, &bigint(c.tokens), &bigint(c.cost_micros)];
        client.execute(sql, &row).await?;
        Ok(())
    }

    /// See [`crate::services::responses::ResponseStore::conversation`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn conversation(&self, owner: &str, id: &str) -> Result<Option<Conversation>, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!("SELECT {COLUMNS} FROM fg_conversations WHERE owner = $1 AND id = $2");
        Ok(client.query_opt(&sql, &[&owner, &id]).await?.map(|r| from_row(id, &r)))
    }

    /// See [`crate::services::responses::ResponseStore::update_conversation`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        change: impl FnOnce(&mut Conversation),
    ) -> Result<Option<Conversation>, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let sql = format!("SELECT {COLUMNS} FROM fg_conversations WHERE owner = $1 AND id = $2 FOR UPDATE");
        let Some(row) = tx.query_opt(&sql, &[&owner, &id]).await? else { return Ok(None) };
        let mut c = from_row(id, &row);
        change(&mut c);
        let (metadata, items) = (c.metadata.to_string(), Value::Array(c.items.clone()).to_string());
        let (tokens, cost) = (bigint(c.tokens), bigint(c.cost_micros));
        tx.execute(
            "UPDATE fg_conversations SET metadata = $3, items = $4, tokens = $5, cost_micros = $6 \
             WHERE owner = $1 AND id = $2",
            &[&owner, &id, &metadata, &items, &tokens, &cost],
        )
        .await?;
        tx.commit().await?;
        Ok(Some(c))
    }

    /// See [`crate::services::responses::ResponseStore::count_conversations`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn count_conversations(&self, owner: &str) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_one("SELECT count(*) FROM fg_conversations WHERE owner = $1", &[&owner]).await?;
        Ok(count(&row, 0))
    }

    /// See [`crate::services::responses::ResponseStore::delete_conversation`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let sql = "DELETE FROM fg_conversations WHERE owner = $1 AND id = $2";
        Ok(client.execute(sql, &[&owner, &id]).await? > 0)
    }
}
