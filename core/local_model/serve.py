"""The local model's own process: llama-cpp-python's OpenAI-compatible server, plus two things.

`core.local_model.process` starts it as `python -m core.local_model.serve <model.gguf> ...`; nothing
else imports llama.cpp, so a crash in it (SIGILL from a wheel built for another CPU, out of memory)
ends this process only. On top of `llama_cpp.server` (used as is, through its public `create_app`):

- **Stop reaches the prompt too.** The server notices a client that left only between generated
  tokens; reading a long prompt runs to its end first (40-50 ms a token on a busy two-core
  machine: a 1,000-token prompt is 40 s). Here a client's disconnect sets a flag that llama.cpp's
  abort callback (`llama_set_abort_callback`, checked between the steps of every decode) reads,
  so the work ends within a fraction of a second, reading or writing. ResolveAI sends one request
  at a time (`core.local_model.queue`), so the flag belongs to the request being served.
- **No orphan.** The ResolveAI processes using this model hold a shared lock on `users.lock`; when
  the last one is gone (even killed with SIGKILL), this process can take the lock and exits.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

# How often the orphan check runs (seconds).
ORPHAN_CHECK_SECONDS = 2.0

# Set when the client of the request being served disconnects; cleared when a request starts.
client_gone = threading.Event()


def stop_work_when_client_leaves() -> None:
    """Give every model llama.cpp's abort callback, reading `client_gone`, at its first decode."""
    import llama_cpp

    # Kept at module level: llama.cpp holds a C pointer to it for the life of the process.
    global _abort_callback
    _abort_callback = llama_cpp.ggml_abort_callback(lambda _data: client_gone.is_set())
    evaluate = llama_cpp.Llama.eval

    def eval_abortable(self: Any, tokens: Any) -> None:
        if getattr(self, "_resolveai_abortable", None) is not self.ctx:
            llama_cpp.llama_set_abort_callback(self.ctx, _abort_callback, None)
            self._resolveai_abortable = self.ctx
        evaluate(self, tokens)

    llama_cpp.Llama.eval = eval_abortable  # type: ignore[method-assign]


_abort_callback: Any = None


ALIVE_PATH = "/resolveai/alive"


def watch_disconnects(app: Any, about: dict[str, Any]) -> Any:
    """ASGI wrapper: a new completion request clears the flag, its client's disconnect sets it.

    It also answers `ALIVE_PATH` itself, with `about` as JSON: the server's own routes wait for
    the model while it works, and a liveness check must not take a busy model for a dead one."""

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == ALIVE_PATH:
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(about).encode()})
            return
        if scope["type"] != "http" or not scope["path"].endswith("/completions"):
            await app(scope, receive, send)
            return
        client_gone.clear()

        async def receive_watched() -> dict:
            message = await receive()
            if message["type"] == "http.disconnect":
                client_gone.set()
            return message

        await app(scope, receive_watched, send)

    return wrapped


def exit_when_orphaned(users_lock: Path) -> None:
    """Exit once no ResolveAI process holds `users_lock` (each holds it shared while it runs)."""
    with users_lock.open("a") as handle:
        while True:
            time.sleep(ORPHAN_CHECK_SECONDS)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            print("local model: no ResolveAI process uses this model any more; exiting", flush=True)
            os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="path of the GGUF file")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--context", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--cache-bytes", type=int, required=True)
    parser.add_argument("--users-lock", type=Path, required=True)
    args = parser.parse_args()

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from core.local_model.cpu_backend import NoCpuBackend, load_cpu_backend

    try:
        variant = load_cpu_backend()
    except NoCpuBackend as error:
        raise SystemExit(f"local model: {error}") from None
    print(f"local model: llama.cpp CPU backend {variant or 'built in'}", flush=True)
    stop_work_when_client_leaves()
    model = ModelSettings(
        model=args.model,
        model_alias="local",
        n_ctx=args.context,
        n_batch=args.batch,
        n_ubatch=args.batch,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        # The server's default keeps the logits of every prompt token: n_ctx × 152k floats.
        logits_all=False,
        # Earlier prompts' states, so a chat turn after a memory or evidence call (another prompt
        # that replaced the live KV cache) still finds its conversation's prefix.
        cache=True,
        cache_type="ram",
        cache_size=args.cache_bytes,
        verbose=False,
    )
    server = ServerSettings(
        host="127.0.0.1",
        port=args.port,
        # Set by the supervisor; the server only answers requests that carry it.
        api_key=os.environ.get("RESOLVEAI_LOCAL_MODEL_KEY") or None,
        # Our queue sends one request at a time; nothing should interrupt it.
        interrupt_requests=False,
    )
    app = create_app(server_settings=server, model_settings=[model])
    threading.Thread(
        target=exit_when_orphaned, args=(args.users_lock,), name="orphan-check", daemon=True
    ).start()
    about = {"cpu_backend": variant}
    uvicorn.run(
        watch_disconnects(app, about), host=server.host, port=server.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
