//! Conversations (OpenAI's Conversations API): items and metadata kept per owner, with no
//! TTL (OpenAI keeps conversation items until they are deleted). A `POST /v1/responses` that
//! names one is sent its items first, and its turn (input items, then output items) is
//! appended when it completed, with what the provider billed for it, which the limits per
//! conversation read.
//!
//! The store has four operations, the same in memory and in Postgres (`fg_conversations`,
//! one row per conversation, its items a JSON array): create, get, update under the row's
//! lock (so two turns appended at once both land), delete.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::{ResponseStore, ResponsesError};

/// One conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// `conv_…`.
    pub id: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Up to 16 string pairs.
    pub metadata: Value,
    /// Its items, oldest first.
    pub items: Vec<Value>,
    /// Input + output tokens of the responses appended to it.
    pub tokens: u64,
    /// Their price in micro-USD.
    pub cost_micros: u64,
}

impl Conversation {
    /// The `conversation` object clients get.
    pub fn object(&self) -> Value {
        json!({"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata})
    }
}

/// Conversations in memory (the file store's; lost on restart like its responses).
#[derive(Debug, Default)]
pub struct MemoryConversations {
    /// Ordered by owner first, so one owner's conversations are one range (counted without
    /// scanning everyone's).
    map: Mutex<BTreeMap<(String, String), Conversation>>,
}

impl MemoryConversations {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Conversation>> {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key(owner: &str, id: &str) -> (String, String) {
    (owner.to_string(), id.to_string())
}

impl ResponseStore {
    /// Keeps a new conversation for `owner`.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn create_conversation(&self, owner: &str, c: &Conversation) -> Result<(), ResponsesError> {
        match self {
            ResponseStore::Memory(m) => {
                m.conversations.lock().insert(key(owner, &c.id), c.clone());
                Ok(())
            }
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.create_conversation(owner, c).await?),
        }
    }

    /// `owner`'s conversation `id`.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn conversation(&self, owner: &str, id: &str) -> Result<Option<Conversation>, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.conversations.lock().get(&key(owner, id)).cloned()),
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.conversation(owner, id).await?),
        }
    }

    /// Changes `owner`'s conversation `id` with `change`, atomically; the conversation after
    /// it (`None`: there is none).
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        change: impl FnOnce(&mut Conversation),
    ) -> Result<Option<Conversation>, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.conversations.lock().get_mut(&key(owner, id)).map(|c| {
                change(c);
                c.clone()
            })),
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.update_conversation(owner, id, change).await?),
        }
    }

    /// How many conversations `owner` keeps.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn count_conversations(&self, owner: &str) -> Result<u64, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => {
                let map = m.conversations.lock();
                let mine = map.range((owner.to_string(), String::new())..).take_while(|((o, _), _)| o == owner);
                Ok(mine.count() as u64)
            }
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.count_conversations(owner).await?),
        }
    }

    /// Deletes `owner`'s conversation `id` and its items; false when there was none.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.conversations.lock().remove(&key(owner, id)).is_some()),
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.delete_conversation(owner, id).await?),
        }
    }
}
