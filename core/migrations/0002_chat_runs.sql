-- 0002_chat_runs: at most one reply being written per chat, across every server process.
--
-- A run claims its chat by setting run_id with a lease (run_expires_at) that it renews while it
-- streams; a second message meanwhile is refused (409). A lease, not a held lock: no connection is
-- tied up for the length of a reply, and a crashed process frees the chat when its lease runs out.

ALTER TABLE chats
    ADD COLUMN run_id uuid,
    ADD COLUMN run_expires_at timestamptz;
