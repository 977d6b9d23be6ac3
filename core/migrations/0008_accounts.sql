-- 0008_accounts: users, their sessions and API tokens, and every chat, memory and preference
-- belonging to one of them.
--
-- The install's single user of before is the row below (LOCAL_USER_ID in core/accounts.py): with
-- AUTH_MODE=none every request acts as it; with AUTH_MODE=password the first admin created takes
-- it over (name and password set on it), so the data of a single-user install becomes the
-- admin's. Session and token secrets are stored as SHA-256 digests: a copy of the database signs
-- nobody in. Login failures and message counts live here too, so limits hold across processes.

CREATE TABLE users (
    user_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    username text NOT NULL,
    -- argon2 (pwdlib); NULL: no password yet (the local user until an admin takes it over).
    password_hash text,
    is_admin boolean NOT NULL DEFAULT false,
    disabled boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    password_changed_at timestamptz
);
CREATE UNIQUE INDEX users_username_idx ON users (lower(username));

INSERT INTO users (user_id, username, is_admin)
VALUES ('00000000-0000-0000-0000-000000000001', 'you', true);

CREATE TABLE sessions (
    token_hash bytea PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users ON DELETE CASCADE,
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_user_id_idx ON sessions (user_id);
CREATE INDEX sessions_expires_at_idx ON sessions (expires_at);

CREATE TABLE api_tokens (
    token_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid NOT NULL REFERENCES users ON DELETE CASCADE,
    name text NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX api_tokens_user_id_idx ON api_tokens (user_id);

-- Failed sign-ins, by the lower-cased name tried and by client address: counted over a window to
-- slow guessing down (core/accounts.py), pruned as they age out.
CREATE TABLE login_failures (
    username text NOT NULL,
    client text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_username_idx ON login_failures (username, failed_at);
CREATE INDEX login_failures_client_idx ON login_failures (client, failed_at);

-- Messages a user sent per minute (fixed one-minute windows), for the per-user rate limit.
CREATE TABLE message_counts (
    user_id uuid NOT NULL REFERENCES users ON DELETE CASCADE,
    minute timestamptz NOT NULL,
    messages integer NOT NULL,
    PRIMARY KEY (user_id, minute)
);

ALTER TABLE chats ADD COLUMN user_id uuid NOT NULL
    DEFAULT '00000000-0000-0000-0000-000000000001' REFERENCES users ON DELETE CASCADE;
CREATE INDEX chats_user_id_updated_at_idx ON chats (user_id, updated_at DESC);
DROP INDEX chats_updated_at_idx;
-- The concurrent-replies limit counts a user's claimed chats.
CREATE INDEX chats_user_id_running_idx ON chats (user_id) WHERE run_id IS NOT NULL;

ALTER TABLE memories ADD COLUMN user_id uuid NOT NULL
    DEFAULT '00000000-0000-0000-0000-000000000001' REFERENCES users ON DELETE CASCADE;
CREATE INDEX memories_user_id_created_at_idx ON memories (user_id, created_at DESC);

ALTER TABLE preferences ADD COLUMN user_id uuid NOT NULL
    DEFAULT '00000000-0000-0000-0000-000000000001' REFERENCES users ON DELETE CASCADE;
ALTER TABLE preferences DROP CONSTRAINT preferences_pkey;
ALTER TABLE preferences ADD PRIMARY KEY (user_id, name);
