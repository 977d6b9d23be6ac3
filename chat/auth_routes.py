"""The accounts API: sign in and out, change your password, your personal API tokens, and (for
admins) the list of users. With AUTH_MODE=none, `GET /api/auth/me` names the one local user and
signing in is off.

`public_router` (who am I, sign in) needs no signed-in user; `router` is included behind
`chat/auth.py`'s `require_user` like every other API router. Errors are the usual JSON shape:
401 not signed in or a wrong password, 403 not an admin or a wrong current password, 404 unknown
token or user, 409 a taken username (or passwords and users asked of a server with
AUTH_MODE=none), 429 too many failed sign-ins (with Retry-After).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from chat.auth import SESSION_COOKIE, SIGN_IN_FIRST, Identity, identity_of, user_of
from core import accounts
from core.http_errors import errors

public_router = APIRouter(prefix="/api")
router = APIRouter(prefix="/api")

USER_FIELDS = ("user_id", "username", "is_admin", "disabled", "created_at")


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=200)
    password: str = Field(min_length=1, max_length=accounts.MAX_PASSWORD_CHARS)


class PasswordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(min_length=1, max_length=accounts.MAX_PASSWORD_CHARS)
    new_password: str = Field(
        min_length=accounts.MIN_PASSWORD_CHARS, max_length=accounts.MAX_PASSWORD_CHARS
    )


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)


class NewUserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=64, pattern=f"^{accounts.USERNAME.pattern}$")
    password: str = Field(
        min_length=accounts.MIN_PASSWORD_CHARS, max_length=accounts.MAX_PASSWORD_CHARS
    )
    is_admin: StrictBool = False


class UserEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    disabled: StrictBool


def _pool(request: Request) -> Any:
    return request.app.state.services.database.pool


def _me(identity: Identity, auth_mode: str, csrf_token: str | None) -> dict[str, Any]:
    user = identity.user
    return {
        "auth_mode": auth_mode,
        "user": {
            "user_id": str(user.user_id),
            "username": user.username,
            "is_admin": user.is_admin,
        },
        "csrf_token": csrf_token,
    }


def _signed_in(request: Request, user: accounts.User, token: str, csrf: str) -> JSONResponse:
    """The answer that signs this client in: who it is, and the session cookie."""
    settings = request.app.state.settings
    response = JSONResponse(_me(Identity(user, "session"), settings.auth_mode, csrf))
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(settings.session_hours * 3600),
        httponly=True,
        samesite="strict",
        # Browsers drop a Secure cookie on plain http (but for localhost): only behind https.
        secure=(settings.app_public_url or "").startswith("https://"),
        path="/",
    )
    return response


@public_router.get("/auth/me", responses=errors(401))
async def me(request: Request) -> dict[str, Any]:
    """Who this request is signed in as (and the CSRF token the page sends back on changes)."""
    identity = await identity_of(request)
    if identity is None:
        raise HTTPException(401, SIGN_IN_FIRST)
    return _me(identity, request.app.state.settings.auth_mode, identity.csrf_token)


@public_router.post("/auth/login", responses=errors(401, 409, 429))
async def login(request: Request, body: LoginIn) -> JSONResponse:
    """Sign in with a username and password: sets the session cookie."""
    settings = request.app.state.settings
    if settings.auth_mode != "password":
        raise HTTPException(409, "Sign-in is off on this server (AUTH_MODE=none).")
    client = request.client.host if request.client else "unknown"
    try:
        user = await accounts.authenticate(
            _pool(request), body.username, body.password, client,
            settings.login_max_failures, settings.login_window_seconds,
        )  # fmt: skip
    except accounts.LoginThrottled as error:
        raise HTTPException(429, str(error), {"Retry-After": str(error.retry_after)}) from None
    if user is None:
        raise HTTPException(401, "Wrong username or password.")
    token, csrf = await accounts.new_session(_pool(request), user.user_id, settings.session_hours)
    return _signed_in(request, user, token, csrf)


@router.post("/auth/logout", status_code=204)
async def logout(request: Request) -> Response:
    """Sign out: this session ends (an API token stays valid: revoke it instead)."""
    identity: Identity = request.state.identity
    if identity.session:
        await accounts.end_session(_pool(request), identity.session)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.post("/auth/password", responses=errors(403, 409))
async def change_password(request: Request, body: PasswordIn) -> JSONResponse:
    """Change your password: every session of yours ends, and this client is signed in again."""
    settings = request.app.state.settings
    if settings.auth_mode != "password":
        raise HTTPException(409, "There are no passwords on this server (AUTH_MODE=none).")
    user = user_of(request)
    try:
        changed = await accounts.change_password(
            _pool(request), user.user_id, body.current_password, body.new_password
        )
    except accounts.AccountError as error:
        raise HTTPException(422, f"new_password: {error}") from None
    if not changed:
        raise HTTPException(403, "The current password is wrong.")
    token, csrf = await accounts.new_session(_pool(request), user.user_id, settings.session_hours)
    return _signed_in(request, user, token, csrf)


@router.get("/auth/tokens")
async def list_tokens(request: Request) -> list[dict[str, Any]]:
    """Your personal API tokens (their secrets are never shown again)."""
    return jsonable_encoder(await accounts.list_tokens(_pool(request), user_of(request).user_id))


@router.post("/auth/tokens", status_code=201)
async def create_token(request: Request, body: TokenIn) -> dict[str, Any]:
    """A new personal API token, for `Authorization: Bearer <token>`: `token` is shown this once."""
    row = await accounts.create_token(_pool(request), user_of(request).user_id, body.name.strip())
    return jsonable_encoder(row)


@router.delete("/auth/tokens/{token_id}", status_code=204, responses=errors(404))
async def delete_token(request: Request, token_id: uuid.UUID) -> Response:
    if not await accounts.delete_token(_pool(request), user_of(request).user_id, token_id):
        raise HTTPException(404, f"No token with id {token_id}")
    return Response(status_code=204)


def _admin(request: Request) -> None:
    if request.app.state.settings.auth_mode != "password":
        raise HTTPException(409, "There are no accounts on this server (AUTH_MODE=none).")
    if not user_of(request).is_admin:
        raise HTTPException(403, "Only an admin can manage users.")


@router.get("/admin/users", responses=errors(403, 409))
async def list_users(request: Request) -> list[dict[str, Any]]:
    _admin(request)
    return jsonable_encoder(await accounts.list_users(_pool(request)))


@router.post("/admin/users", status_code=201, responses=errors(403, 409))
async def add_user(request: Request, body: NewUserIn) -> dict[str, Any]:
    """Add an account (admins only)."""
    _admin(request)
    try:
        row = await accounts.add_user(_pool(request), body.username, body.password, body.is_admin)
    except accounts.UsernameTaken as error:
        raise HTTPException(409, str(error)) from None
    except accounts.AccountError as error:
        raise HTTPException(422, str(error)) from None
    return jsonable_encoder(row)


@router.patch("/admin/users/{user_id}", responses=errors(403, 404, 409))
async def edit_user(request: Request, user_id: uuid.UUID, body: UserEdit) -> dict[str, Any]:
    """Disable (signed out everywhere, tokens refused) or enable an account (admins only)."""
    _admin(request)
    if user_id == user_of(request).user_id and body.disabled:
        raise HTTPException(409, "You cannot disable your own account.")
    row = await accounts.set_disabled(_pool(request), user_id, body.disabled)
    if row is None:
        raise HTTPException(404, f"No user with id {user_id}")
    return jsonable_encoder(row)
