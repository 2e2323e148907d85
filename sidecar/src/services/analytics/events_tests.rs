//! The events feed with store incidents (`fg_events`) beside the records' events, on the
//! machine's real PostgreSQL: one newest-first order and one cursor across both tables, and
//! no incidents for a key-manager narrowed to key groups.

use super::events::{self, EventKind};
use super::params::{EventsQuery, Range};
use super::tests::{manager_of, owner, rec, store, T0};
use crate::services::pg::tests::Schema;

#[tokio::test]
async fn store_incidents_page_with_the_records_events() {
    let schema = Schema::new().await;
    let mut failed = rec("m", "k1", &["team-a"], T0 + 1000);
    failed.status = 502;
    let mut refused = rec("m", "k1", &["team-a"], T0 + 3000);
    (refused.status, refused.provider) = (429, String::new());
    let pg = store(&schema, &[failed, refused]).await;
    let client = pg.pool().get().await.unwrap();
    for (at, kind, detail) in [(T0 + 2000, "store_down", "connection refused"), (T0 + 4000, "store_up", "in sync")] {
        let sql = "INSERT INTO fg_events (at, kind, store, replica, detail) \
                   VALUES (to_timestamp($1::float8 / 1000), $2, 'redis', 'r1', $3)";
        #[allow(clippy::cast_precision_loss)]
        client.execute(sql, &[&(at as f64), &kind, &detail]).await.unwrap();
    }
    let range = Range { from: T0, to: T0 + 10_000 };
    let first = events::run(pg.pool(), &owner(), &EventsQuery { range, limit: 2, after: None }).await.unwrap();
    let kinds: Vec<_> = first.events.iter().map(|e| (e.at - T0, e.kind)).collect();
    assert_eq!(kinds, [(4000, EventKind::StoreUp), (3000, EventKind::LimitRefused)]);
    let up = &first.events[0];
    assert_eq!(
        (up.store.as_deref(), up.replica.as_deref(), up.detail.as_deref()),
        (Some("redis"), Some("r1"), Some("in sync"))
    );
    assert_eq!((up.status, up.key.as_deref(), up.request_id.as_str()), (0, None, ""));
    let after = first.next_cursor.as_deref().map(|c| crate::services::usage::requests::Cursor::decode(c).unwrap());
    let rest = events::run(pg.pool(), &owner(), &EventsQuery { range, limit: 2, after }).await.unwrap();
    let kinds: Vec<_> = rest.events.iter().map(|e| (e.at - T0, e.kind)).collect();
    assert_eq!(kinds, [(2000, EventKind::StoreDown), (1000, EventKind::UpstreamFailure)]);
    assert!(rest.next_cursor.is_none());
    let narrowed =
        events::run(pg.pool(), &manager_of(&["team-a"]), &EventsQuery { range, limit: 10, after: None }).await.unwrap();
    let kinds: Vec<_> = narrowed.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::LimitRefused, EventKind::UpstreamFailure],
        "no store incidents for a narrowed caller"
    );
}
