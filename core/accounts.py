"""Accounts: users and their passwords, sign-in sessions, personal API tokens, sign-in throttling
and the per-user message limits, all in Postgres (migration 0008) so every server process agrees.

Passwords are hashed with argon2 (pwdlib), in a thread: a hash takes ~0.2 s of CPU that must not
stall the event loop. Session and API-token secrets are random (256 bits) and stored as SHA-256
digests, so a copy of the database signs nobody in. With AUTH_MODE=none every request acts as
`LOCAL_USER`, the install's one user; the first admin created takes that row over, so the data a
single-user install gathered becomes the admin's.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from pwdlib import PasswordHash

from core.statements import Db, execute, fetch_all, fetch_one

LOCAL_USER_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")  # migration 0008's row
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
SESSION_PREFIX = "rais_"
TOKEN_PREFIX = "rai_"
USER_COLUMNS = "user_id, username, is_admin, disabled, created_at"

_hasher = PasswordHash.recommended()
# Verified against when the name is unknown, so a wrong name takes as long as a wrong password
# and the timing does not tell which names exist.
_DUMMY_HASH = _hasher.hash(secrets.token_hex(16))


@dataclass(frozen=True)
class User:
    """Who a request acts for."""

    user_id: uuid.UUID
    username: str
    is_admin: bool


LOCAL_USER = User(LOCAL_USER_ID, "you", True)


class AccountError(ValueError):
    """A request about accounts that cannot be done (the message says why, for the user)."""


class UsernameTaken(AccountError):
    pass


class LoginThrottled(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"Too many failed sign-ins: try again in {retry_after} s.")
        self.retry_after = retry_after


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def check_username(username: str) -> str:
    if not USERNAME.fullmatch(username):
        raise AccountError(
            "A username is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter"
            " or digit."
        )
    return username


def check_password(password: str) -> str:
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise AccountError(
            f"A password is {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters long."
        )
    return password


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, check_password(password))


async def _verify(password: str, password_hash: str | None) -> bool:
    return await asyncio.to_thread(_hasher.verify, password, password_hash or _DUMMY_HASH) and (
        password_hash is not None
    )


def _user(row: dict[str, Any]) -> User:
    return User(row["user_id"], row["username"], row["is_admin"])


# ---------------------------------------------------------------------------------------------
# Users


async def add_user(db: Db, username: str, password: str, is_admin: bool = False) -> dict[str, Any]:
    """A new account. The first admin takes over the single-user install's row (its chats and
    memories become theirs). UsernameTaken if the name is in use (in any case), AccountError for
    a bad name or password."""
    check_username(username)
    hashed = await hash_password(password)
    try:
        if is_admin:
            row = await fetch_one(
                db,
                "UPDATE users SET username = %s, password_hash = %s, password_changed_at = now()"
                f" WHERE user_id = %s AND password_hash IS NULL RETURNING {USER_COLUMNS}",
                (username, hashed, LOCAL_USER_ID),
            )
            if row is not None:
                return row
        row = await fetch_one(
            db,
            "INSERT INTO users (username, password_hash, is_admin, password_changed_at)"
            f" VALUES (%s, %s, %s, now()) RETURNING {USER_COLUMNS}",
            (username, hashed, is_admin),
        )
    except psycopg.errors.UniqueViolation:
        raise UsernameTaken(f"The username {username!r} is taken.") from None
    assert row is not None
    return row


async def anyone_can_sign_in(db: Db) -> bool:
    row = await fetch_one(
        db, "SELECT EXISTS (SELECT 1 FROM users WHERE password_hash IS NOT NULL) AS yes", ()
    )
    return bool(row and row["yes"])


async def list_users(db: Db) -> list[dict[str, Any]]:
    return await fetch_all(
        db,
        f"SELECT {USER_COLUMNS} FROM users WHERE password_hash IS NOT NULL"
        " ORDER BY lower(username)",
        (),
    )


async def set_disabled(db: Db, user_id: uuid.UUID, disabled: bool) -> dict[str, Any] | None:
    """Disable (or enable) an account; a disabled one is signed out everywhere, and its tokens
    stop working (they are checked against the flag). None if there is no such account."""
    row = await fetch_one(
        db,
        "WITH changed AS (UPDATE users SET disabled = %(disabled)s"
        "  WHERE user_id = %(user)s AND password_hash IS NOT NULL RETURNING *),"
        " signed_out AS (DELETE FROM sessions WHERE %(disabled)s"
        "  AND user_id IN (SELECT user_id FROM changed))"
        f" SELECT {USER_COLUMNS} FROM changed",
        {"disabled": disabled, "user": user_id},
    )
    return row


async def change_password(db: Db, user_id: uuid.UUID, current: str, new: str) -> bool:
    """Set a new password if `current` is right (False otherwise); every session of the user ends
    (the caller signs this client in again)."""
    row = await fetch_one(db, "SELECT password_hash FROM users WHERE user_id = %s", (user_id,))
    if row is None or not await _verify(current, row["password_hash"]):
        return False
    hashed = await hash_password(new)
    await execute(
        db,
        "WITH changed AS (UPDATE users SET password_hash = %(hash)s, password_changed_at = now()"
        "  WHERE user_id = %(user)s RETURNING user_id)"
        " DELETE FROM sessions WHERE user_id IN (SELECT user_id FROM changed)",
        {"hash": hashed, "user": user_id},
    )
    return True


# ---------------------------------------------------------------------------------------------
# Signing in


async def authenticate(
    db: Db, username: str, password: str, client: str, max_failures: int, window_seconds: float
) -> User | None:
    """The account if the name and password are right (and it is enabled), else None and the
    failure counted. LoginThrottled while the name has `max_failures` failures within the window,
    or its client address four times as many (the right password then waits too)."""
    name = username.strip().lower()
    row = await fetch_one(
        db,
        "WITH pruned AS (DELETE FROM login_failures"
        "  WHERE failed_at < now() - make_interval(secs => %(window)s))"
        " SELECT"
        "  (SELECT count(*) FROM login_failures WHERE username = %(name)s"
        "   AND failed_at >= now() - make_interval(secs => %(window)s)) AS by_name,"
        "  (SELECT count(*) FROM login_failures WHERE client = %(client)s"
        "   AND failed_at >= now() - make_interval(secs => %(window)s)) AS by_client,"
        "  (SELECT min(failed_at) FROM login_failures"
        "   WHERE username = %(name)s OR client = %(client)s)"
        "   + make_interval(secs => %(window)s) - now() AS wait,"
        "  (SELECT row_to_json(u) FROM (SELECT user_id, username, is_admin, password_hash"
        "   FROM users WHERE lower(username) = %(name)s AND NOT disabled) u) AS account",
        {"name": name, "client": client, "window": window_seconds},
    )
    assert row is not None
    if row["by_name"] >= max_failures or row["by_client"] >= 4 * max_failures:
        wait = row["wait"].total_seconds() if row["wait"] is not None else window_seconds
        raise LoginThrottled(max(1, int(wait) + 1))
    account = row["account"]
    if await _verify(password, account["password_hash"] if account else None):
        assert account is not None
        await execute(db, "DELETE FROM login_failures WHERE username = %s", (name,))
        return User(uuid.UUID(account["user_id"]), account["username"], account["is_admin"])
    await execute(
        db, "INSERT INTO login_failures (username, client) VALUES (%s, %s)", (name[:200], client)
    )
    return None


async def new_session(db: Db, user_id: uuid.UUID, hours: float) -> tuple[str, str]:
    """A signed-in session: its secret (the cookie) and its CSRF token."""
    token = SESSION_PREFIX + secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(24)
    await execute(
        db,
        "WITH expired AS (DELETE FROM sessions WHERE expires_at < now())"
        " INSERT INTO sessions (token_hash, user_id, csrf_token, expires_at)"
        " VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
        (_digest(token), user_id, csrf, hours * 3600),
    )
    return token, csrf


async def session_user(db: Db, token: str) -> tuple[User, str] | None:
    """The account a session cookie signs in, with the session's CSRF token; None if the session
    ended, expired, or the account is disabled."""
    if not token.startswith(SESSION_PREFIX):
        return None
    row = await fetch_one(
        db,
        "SELECT u.user_id, u.username, u.is_admin, s.csrf_token FROM sessions s"
        " JOIN users u USING (user_id)"
        " WHERE s.token_hash = %s AND s.expires_at > now() AND NOT u.disabled",
        (_digest(token),),
    )
    return (_user(row), row["csrf_token"]) if row else None


async def end_session(db: Db, token: str) -> None:
    await execute(db, "DELETE FROM sessions WHERE token_hash = %s", (_digest(token),))


# ---------------------------------------------------------------------------------------------
# Personal API tokens

TOKEN_COLUMNS = "token_id, name, created_at, last_used_at"


async def create_token(db: Db, user_id: uuid.UUID, name: str) -> dict[str, Any]:
    """A new API token: its row and, this once, its secret (`token`)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = await fetch_one(
        db,
        "INSERT INTO api_tokens (user_id, name, token_hash) VALUES (%s, %s, %s)"
        f" RETURNING {TOKEN_COLUMNS}",
        (user_id, name, _digest(token)),
    )
    assert row is not None
    return {**row, "token": token}


async def list_tokens(db: Db, user_id: uuid.UUID) -> list[dict[str, Any]]:
    return await fetch_all(
        db,
        f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = %s ORDER BY created_at DESC",
        (user_id,),
    )


async def delete_token(db: Db, user_id: uuid.UUID, token_id: uuid.UUID) -> bool:
    return bool(
        await execute(
            db, "DELETE FROM api_tokens WHERE token_id = %s AND user_id = %s", (token_id, user_id)
        )
    )


async def token_user(db: Db, token: str) -> User | None:
    """The account an API token acts for (its last use noted, at most once a minute), or None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    row = await fetch_one(
        db,
        "WITH found AS (SELECT t.token_id, t.last_used_at, u.user_id, u.username, u.is_admin"
        "  FROM api_tokens t JOIN users u USING (user_id)"
        "  WHERE t.token_hash = %s AND NOT u.disabled),"
        " noted AS (UPDATE api_tokens SET last_used_at = now() WHERE token_id IN"
        "  (SELECT token_id FROM found WHERE last_used_at IS NULL"
        "   OR last_used_at < now() - interval '1 minute'))"
        " SELECT user_id, username, is_admin FROM found",
        (_digest(token),),
    )
    return _user(row) if row else None


# ---------------------------------------------------------------------------------------------
# Per-user limits


async def admit_message(db: Db, user_id: uuid.UUID, per_minute: int, concurrent: int) -> int | None:
    """Count a message against the user's limits: None if it may go, else the seconds to wait.
    `per_minute`: messages per clock minute; `concurrent`: replies being written at once in the
    user's chats (0: no limit). In Postgres, so the limits hold across server processes."""
    row = await fetch_one(
        db,
        "WITH pruned AS (DELETE FROM message_counts WHERE user_id = %(user)s"
        "  AND minute < date_trunc('minute', now()) - interval '1 hour'),"
        " counted AS (INSERT INTO message_counts AS c (user_id, minute, messages)"
        "  VALUES (%(user)s, date_trunc('minute', now()), 1) ON CONFLICT (user_id, minute)"
        "  DO UPDATE SET messages = c.messages + 1 RETURNING messages)"
        " SELECT (SELECT messages FROM counted) AS messages,"
        "  (SELECT count(*) FROM chats WHERE user_id = %(user)s AND run_id IS NOT NULL"
        "   AND run_expires_at > now()) AS running,"
        "  extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now()) AS wait",
        {"user": user_id},
    )
    assert row is not None
    if per_minute and row["messages"] > per_minute:
        return max(1, int(row["wait"]) + 1)
    if concurrent and row["running"] >= concurrent:
        return 5  # a reply takes seconds: try again shortly
    return None
