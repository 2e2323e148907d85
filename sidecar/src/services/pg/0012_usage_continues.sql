-- ferrogate usage records, version 12: what a Responses follow-up continued (the stored
-- response or conversation id; ferrogate_core::usage::Record::continues) and whether the
-- gateway sent the conversation rebuilt from its store (Record::rebuilt: its prompt tokens
-- are the whole conversation's). Older rows continued nothing.
ALTER TABLE fg_usage ADD COLUMN continues text;
ALTER TABLE fg_usage ADD COLUMN rebuilt boolean NOT NULL DEFAULT false;
