//! The request log's cases on the machine's real PostgreSQL (a schema of its own per test):
//! the same as the memory store answers (`usage::requests::tests`), and the same items.

use std::sync::{Arc, OnceLock};

use super::super::tests::Schema;
use super::super::PgStore;
use crate::services::source::Database;
use crate::services::usage::requests::tests::{add, by_id_case, filters_case, paging_case};
use crate::services::usage::requests::{Params, RequestFilter};
use crate::services::usage::{UsageBackend, UsageStore};

async fn backend(schema: &Schema) -> UsageBackend {
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let slot = Arc::new(OnceLock::new());
    slot.set(Database { store: Arc::new(store), changed: Arc::default(), redis: None }).unwrap();
    UsageBackend::postgres(slot)
}

#[tokio::test]
async fn postgres_filters_as_the_memory_store_does() {
    let schema = Schema::new().await;
    filters_case(&backend(&schema).await).await;
}

#[tokio::test]
async fn postgres_pages_without_gaps_or_repeats_while_records_arrive() {
    let schema = Schema::new().await;
    paging_case(&backend(&schema).await).await;
}

#[tokio::test]
async fn postgres_finds_a_request_by_id() {
    let schema = Schema::new().await;
    by_id_case(&backend(&schema).await).await;
}

#[tokio::test]
async fn postgres_and_memory_return_the_same_items() {
    let schema = Schema::new().await;
    let (pg, memory) = (backend(&schema).await, UsageBackend::memory(UsageStore::new(None)));
    for b in [&pg, &memory] {
        add(b, 0..40).await;
    }
    let p = |key: Option<&str>, status_class: Option<&str>, limit| Params {
        key: key.map(String::from),
        status_class: status_class.map(String::from),
        limit: Some(limit),
        ..Params::default()
    };
    for params in [p(None, None, 1000), p(Some("carol"), None, 3), p(None, Some("4xx"), 7)] {
        let f = RequestFilter::parse(params).unwrap();
        let (a, b) = (pg.requests(&f).await.unwrap(), memory.requests(&f).await.unwrap());
        assert_eq!(a.requests, b.requests, "{f:?}");
        assert_eq!(a.next_cursor.is_some(), b.next_cursor.is_some(), "{f:?}");
    }
}
