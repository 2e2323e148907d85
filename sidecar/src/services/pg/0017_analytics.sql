-- The analytics API (services::analytics): aggregates over a range of fg_usage.
--
-- The range aggregates (usage buckets, top-N, forecast) read every row of their range through
-- fg_usage_time (0002, a B-tree on started_at): their time goes to sorting for the percentiles
-- and grouping, not to finding rows. A covering index of the columns they read was measured
-- (scripts/analytics-timing, docs/performance.md "Analytics queries") and gained nothing
-- measurable on a million records, so none is added: it would only cost every insert.
--
-- The events feed (services::analytics::events::IS_EVENT, the same predicate): refusals,
-- budgets, upstream failures, guardrail blocks and cut streams are few, so the feed walks
-- them alone, newest first, however rare they are.
CREATE INDEX IF NOT EXISTS fg_usage_events ON fg_usage (started_at DESC, id DESC)
    WHERE (status = 402 OR (status = 429 AND provider = '') OR (status >= 500 AND provider <> '')
        OR cut OR guardrails->>'blocked' IS NOT NULL);
