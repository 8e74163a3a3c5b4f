"""Bearer-token authentication: one shared token, checked before a request body is read.

The token comes from ``WFKIT_API_TOKEN`` or is generated when the server starts. Every path but
the public ones (health, the OpenAPI document and its docs page) needs
``Authorization: Bearer <token>``; a missing or wrong token gets a 401 problem document with a
``WWW-Authenticate: Bearer`` challenge. Tokens are compared in constant time, and a token
shorter than 16 characters is refused at start-up.
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from wfkit.api.errors import ApiProblem, problem_response
from wfkit.errors import UsageError

__all__ = [
    "MIN_TOKEN_LENGTH",
    "PUBLIC_PATHS",
    "TOKEN_ENV",
    "TokenMiddleware",
    "bearer",
    "check_token",
    "new_token",
    "require_token",
    "resolve_token",
    "token_matches",
]

TOKEN_ENV = "WFKIT_API_TOKEN"
MIN_TOKEN_LENGTH = 16
"""Shortest token accepted, in characters: a short shared secret can be guessed."""
PUBLIC_PATHS = frozenset(
    {"/api/v1/health", "/api/v1/openapi.json", "/api/v1/docs", "/api/v1/docs/oauth2-redirect"}
)
"""Paths anyone may read: liveness, and the API's own description."""

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description=f"The server's token: from {TOKEN_ENV}, or printed when 'wfkit serve' starts.",
)


def new_token() -> str:
    """A fresh random token (URL-safe, 256 bits)."""
    return secrets.token_urlsafe(32)


def check_token(token: str, where: str = "given") -> None:
    """Refuse an empty token or one shorter than :data:`MIN_TOKEN_LENGTH` (``UsageError``)."""
    if not token or not token.strip():
        raise UsageError(
            f"the API token is empty; set {TOKEN_ENV} or pass a token (wfkit serve makes one)"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise UsageError(
            f"the API token {where} is {len(token)} characters long; use at least "
            f"{MIN_TOKEN_LENGTH}, e.g. one made with "
            'python -c "import secrets; print(secrets.token_urlsafe(32))", or leave '
            f"{TOKEN_ENV} unset and wfkit serve makes one and prints it"
        )


def resolve_token(token: str | None = None) -> tuple[str, bool]:
    """The token to use and whether it was generated (so the caller prints it once).

    Raises ``UsageError`` when the given or ``WFKIT_API_TOKEN``'s token is too short.
    """
    if token:
        check_token(token)
        return token, False
    chosen = os.environ.get(TOKEN_ENV, "").strip()
    if chosen:
        check_token(chosen, f"in {TOKEN_ENV}")
        return chosen, False
    return new_token(), True


def token_matches(authorization: bytes | str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time compare)."""
    if authorization is None:
        return False
    raw = authorization.encode("latin-1") if isinstance(authorization, str) else authorization
    scheme, _, given = raw.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(given.strip(), token.encode())


def _challenge(authorization: bytes | str | None) -> tuple[str, dict[str, str]]:
    if not authorization:
        return (
            "this route needs a bearer token: send 'Authorization: Bearer <token>' with the "
            f"token the server printed at start (or the one in {TOKEN_ENV})",
            {"WWW-Authenticate": 'Bearer realm="wfkit"'},
        )
    return (
        "the bearer token is not valid for this server; use the token it printed at start, the "
        f"one in its {TOKEN_ENV}, or the one in its '<db>.server.json' file",
        {"WWW-Authenticate": 'Bearer realm="wfkit", error="invalid_token"'},
    )


class TokenMiddleware:
    """ASGI middleware refusing requests without the token, before anything reads the body."""

    def __init__(self, app: ASGIApp, token: str, public: frozenset[str] = PUBLIC_PATHS) -> None:
        self.app = app
        self.token = token
        self.public = public  # paths served without the token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization")
        if token_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        detail, headers = _challenge(header)
        response = problem_response(
            401, detail, slug="unauthorized", instance=scope["path"], headers=headers
        )
        await response(scope, receive, send)


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """Route dependency: documents the scheme in OpenAPI, and checks again behind the middleware
    (async: it only compares a header, so it needs no thread of the pool)."""
    header = request.headers.get("authorization")
    if not token_matches(header, request.app.state.token):
        detail, headers = _challenge(header)
        raise ApiProblem(401, "unauthorized", detail, headers=headers)
