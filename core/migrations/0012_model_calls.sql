-- 0012_model_calls: one row per model call (each deployment the Router tried), for the Usage page.
--
-- Written after the call ended, from LiteLLM's callback (core/model_calls.py): the role asked for
-- (`role`: chat, utility, memory…), the deployment that ran (`model`, LiteLLM's name), whether a
-- fallback ran it, the step (`step`: "chat call 1", "web answer", "summary"…), tokens, cost in
-- USD (LiteLLM's offline cost map; 0 for the local model), latency and time to first token in ms
-- (of a streamed call; NULL for one answered all at once, or failed), and a failed call's error.
-- `chat_id` carries no foreign key: usage outlives a deleted chat. A user's rows go with the user.

CREATE TABLE model_calls (
    call_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid REFERENCES users ON DELETE CASCADE,
    chat_id uuid,
    role text NOT NULL,
    model text NOT NULL,
    fallback boolean NOT NULL DEFAULT false,
    step text NOT NULL,
    prompt_tokens integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    cost double precision NOT NULL DEFAULT 0,
    latency_ms integer NOT NULL,
    ttft_ms integer,
    error text,
    called_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX model_calls_user_id_called_at_idx ON model_calls (user_id, called_at);
