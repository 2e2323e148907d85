-- ferrogate conversations, version 10: OpenAI's Conversations API, per owner (the digest of
-- the virtual key that created it; '' on a gateway without keys). items is the JSON array of
-- its items, oldest first, rewritten under the row's lock when a turn or items are appended;
-- metadata a JSON object. tokens and cost_micros are what the responses appended to it used
-- (read by the limits per conversation). No TTL: items are kept until deleted.
CREATE TABLE fg_conversations (
    owner       text   NOT NULL,
    id          text   NOT NULL,
    created_at  bigint NOT NULL,
    metadata    text   NOT NULL,
    items       text   NOT NULL,
    tokens      bigint NOT NULL DEFAULT 0,
    cost_micros bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, id)
);
