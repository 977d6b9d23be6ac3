"""Who a request acts for: the sign-in session cookie or a personal API token (AUTH_MODE=password),
or the install's one user (AUTH_MODE=none), checked before any API route runs.

`require_user` is the dependency every API router is included with (server.py), so no route can
forget it; routes read the user with `user_of(request)`. A request signed in by its cookie must
also send the session's CSRF token in `X-CSRF-Token` to change anything: a page on another site
cannot read that token, so it cannot act for the user even where the browser would send the
cookie (the Origin check of core/http_guard.py is the first line; this is the second).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Literal

from fastapi import HTTPException, Request

from core import accounts
from core.accounts import LOCAL_USER, User
from core.config import Settings
from core.errors import StartupError
from core.statements import Db

SESSION_COOKIE = "resolveai_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SIGN_IN_FIRST = "Sign in first."


@dataclass(frozen=True)
class Identity:
    user: User
    via: Literal["none", "session", "token"]
    csrf_token: str | None = None  # the session's
    session: str | None = None  # the session cookie's secret


async def identify(settings: Settings, db: Db, headers: dict[str, str], cookie: str | None) -> (
    Identity | None
):  # fmt: skip
    """Who the request is from, or None if it is signed in by nothing valid. A bearer token wins
    over the cookie (a script's request is its token's, whatever cookie it carries)."""
    if settings.auth_mode == "none":
        return Identity(LOCAL_USER, "none")
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        user = await accounts.token_user(db, credentials.strip())
        return Identity(user, "token") if user else None
    if cookie:
        found = await accounts.session_user(db, cookie)
        if found:
            return Identity(found[0], "session", csrf_token=found[1], session=cookie)
    return None


async def identity_of(request: Request) -> Identity | None:
    return await identify(
        request.app.state.settings,
        request.app.state.services.database.pool,
        {k.lower(): v for k, v in request.headers.items()},
        request.cookies.get(SESSION_COOKIE),
    )


async def require_user(request: Request) -> None:
    """401 unless signed in; 403 for a cookie-signed change without the CSRF token."""
    identity = await identity_of(request)
    if identity is None:
        raise HTTPException(401, SIGN_IN_FIRST, headers={"WWW-Authenticate": "Bearer"})
    if identity.via == "session" and request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), (identity.csrf_token or "").encode()):
            raise HTTPException(
                403, "This page's sign-in check (X-CSRF-Token) is missing or out of date: reload "
                "the page and try again.",
            )  # fmt: skip
    request.state.identity = identity


def user_of(request: Request) -> User:
    """The user `require_user` found for this request."""
    return request.state.identity.user


async def prepare_accounts(settings: Settings, db: Db) -> None:
    """With AUTH_MODE=password, make sure someone can sign in: create the first admin from
    ADMIN_USERNAME and ADMIN_PASSWORD if no account has a password yet, else refuse to start."""
    if settings.auth_mode != "password" or await accounts.anyone_can_sign_in(db):
        return
    if settings.admin_username is None or settings.admin_password is None:
        raise StartupError(
            "AUTH_MODE=password but no account exists yet: set ADMIN_USERNAME and ADMIN_PASSWORD"
            " for the first admin, or run `python server.py add-user NAME --admin`"
        )
    try:
        await accounts.add_user(
            db, settings.admin_username, settings.admin_password.get_secret_value(), is_admin=True
        )
    except accounts.AccountError as error:
        # Several processes starting at once each saw no account; the first one made the admin.
        if isinstance(error, accounts.UsernameTaken) and await accounts.anyone_can_sign_in(db):
            return
        raise StartupError(f"ADMIN_USERNAME / ADMIN_PASSWORD: {error}") from None
