-- Incidents of the sidecars' stores (services::incidents): Redis or PostgreSQL lost
-- (store_down) and regained (store_up), per replica. The analytics events feed reads them with
-- the usage records' events, newest first by (time, id): the ids come from fg_usage's own
-- sequence, so one keyset cursor pages through both tables.
CREATE TABLE IF NOT EXISTS fg_events (
    id      bigint      PRIMARY KEY DEFAULT nextval(pg_get_serial_sequence('fg_usage', 'id')::regclass),
    at      timestamptz NOT NULL,
    kind    text        NOT NULL,
    store   text        NOT NULL,
    replica text        NOT NULL,
    detail  text        NOT NULL
);
CREATE INDEX IF NOT EXISTS fg_events_time ON fg_events (at DESC, id DESC);
