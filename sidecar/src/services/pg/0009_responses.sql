-- ferrogate stored responses, version 9: what a Responses API request with store: true (or no
-- store) produced, per owner (the digest of the virtual key that created it; '' on a gateway
-- without keys). response and input_items are JSON text kept as the client saw them (json,
-- not jsonb, would reorder nothing either; text avoids parsing on every read). bytes is what
-- the entry counts against responses.max_bytes_per_key. origin is the provider that answered
-- without translation ('' when translated): a chain all of one origin continues there.
-- tokens and cost_micros are what the provider billed for it (summed per conversation by the
-- conversation limits).
CREATE TABLE fg_responses (
    owner       text   NOT NULL,
    id          text   NOT NULL,
    created_ms  bigint NOT NULL,
    expires_ms  bigint NOT NULL,
    bytes       bigint NOT NULL,
    response    text   NOT NULL,
    input_items text   NOT NULL,
    origin      text   NOT NULL DEFAULT '',
    tokens      bigint NOT NULL DEFAULT 0,
    cost_micros bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, id)
);
-- The sweep drops expired rows; a key over its bytes loses its oldest rows.
CREATE INDEX fg_responses_expiry ON fg_responses (expires_ms);
CREATE INDEX fg_responses_owner_age ON fg_responses (owner, created_ms);
