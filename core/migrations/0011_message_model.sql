-- 0011_message_model: which model wrote a reply, and the notes shown with it.
--
-- `model` is the LiteLLM model of the deployment that answered (a fallback's when one did:
-- "local/qwen2.5-coder-1.5b-instruct"); NULL for user messages and replies saved before this.
-- `notes` are plain sentences shown under the reply ("The hosted model is unavailable; answered
-- with the local model."); old rows get none.

ALTER TABLE messages ADD COLUMN IF NOT EXISTS model text;
ALTER TABLE messages ADD COLUMN IF NOT EXISTS notes jsonb NOT NULL DEFAULT '[]';
