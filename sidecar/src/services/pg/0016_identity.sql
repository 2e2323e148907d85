-- ferrogate configuration and usage, version 16: admin identity.
-- fg_admin_users: people who use the admin API. A user has a password (argon2id PHC string),
-- an OIDC identity (issuer + subject, created at first login), or both; `role` is one of
-- owner, admin, key-manager, viewer; `key_groups` narrows a key-manager to those key groups
-- (empty: every group). fg_admin_sessions: logged-in browsers, by the SHA-256 of the cookie
-- value (the value itself is never stored), with the CSRF token of the session and, for OIDC
-- logins, the ID token (logout's id_token_hint). fg_admin_tokens: API tokens, by the SHA-256
-- of the plaintext, shown once; `prefix` keeps `fgt_` and the next 8 characters, to tell
-- tokens apart in listings. fg_admin_login_failures: failed logins by user name and by
-- source address, for throttling across replicas. fg_admin_oidc_flows: the state, nonce and
-- PKCE verifier of a login in flight, by the SHA-256 of `state` (single use). fg_audit: every
-- admin change and login, who (actor), what (action, object, before/after with secrets
-- redacted), when, from where. Written to be harmless if run twice (IF NOT EXISTS).
CREATE TABLE IF NOT EXISTS fg_admin_users (
    id            bigserial PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    role          text NOT NULL,
    key_groups    text[] NOT NULL DEFAULT '{}',
    password_hash text,
    oidc_issuer   text,
    oidc_subject  text,
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (oidc_issuer, oidc_subject)
);

CREATE TABLE IF NOT EXISTS fg_admin_sessions (
    id_digest  bytea PRIMARY KEY,
    user_id    bigint NOT NULL REFERENCES fg_admin_users (id) ON DELETE CASCADE,
    csrf       text NOT NULL,
    via        text NOT NULL,
    id_token   text,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fg_admin_sessions_user ON fg_admin_sessions (user_id);
CREATE INDEX IF NOT EXISTS fg_admin_sessions_created ON fg_admin_sessions (created_at);

CREATE TABLE IF NOT EXISTS fg_admin_tokens (
    id           bigserial PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES fg_admin_users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    digest       bytea NOT NULL UNIQUE,
    prefix       text NOT NULL DEFAULT '',
    role         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX IF NOT EXISTS fg_admin_tokens_user ON fg_admin_tokens (user_id);

CREATE TABLE IF NOT EXISTS fg_admin_login_failures (
    subject text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fg_admin_login_failures_subject ON fg_admin_login_failures (subject, at);
CREATE INDEX IF NOT EXISTS fg_admin_login_failures_at ON fg_admin_login_failures (at);

CREATE TABLE IF NOT EXISTS fg_admin_oidc_flows (
    state_digest bytea PRIMARY KEY,
    binding      bytea NOT NULL,
    nonce        text NOT NULL,
    verifier     text NOT NULL,
    return_to    text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS fg_audit (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text NOT NULL,
    actor_kind text NOT NULL,
    action     text NOT NULL,
    object     text,
    method     text,
    path       text,
    source_ip  text,
    user_agent text,
    status     integer NOT NULL,
    before     jsonb,
    after      jsonb,
    detail     text
);
CREATE INDEX IF NOT EXISTS fg_audit_at ON fg_audit (at DESC, id DESC);
CREATE INDEX IF NOT EXISTS fg_audit_actor ON fg_audit (actor, at DESC);
CREATE INDEX IF NOT EXISTS fg_audit_object ON fg_audit (object, at DESC);
