"""Bearer-token authentication: one shared token, checked before a request body is read.

The token comes from ``WFKIT_API_TOKEN`` or is generated when the server starts. Every path but
the public ones (health, the OpenAPI document and its docs page) needs
``Authorization: Bearer <token>``; a missing or wrong token gets a 401 problem document with a
``WWW-Authenticate: Bearer`` challenge. Tokens are compared in constant time, and a weak token
is refused at start-up (:func:`check_token`): shorter than 16 characters, fewer than 8 different
characters, or anything but printable ASCII (spaces and control characters included).
"""

from __future__ import annotations

import hmac
import os
import secrets
import unicodedata
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from wfkit.api.errors import ApiProblem, problem_response
from wfkit.errors import UsageError

__all__ = [
    "MAKE_ONE",
    "MIN_TOKEN_LENGTH",
    "MIN_TOKEN_VARIETY",
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
MIN_TOKEN_VARIETY = 8
"""Fewest different characters a token may have: ``aaaa...`` or ``abab...`` can be guessed."""
MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
"""The command the refusals show to make a good token."""
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
    """A fresh random token (URL-safe, 256 bits) that :func:`check_token` accepts."""
    while True:
        token = secrets.token_urlsafe(32)
        if _weakness(token) is None:  # 43 characters of 64 kinds: a refusal never really happens
            return token


def check_token(token: str, where: str = "given") -> None:
    """Refuse a token that is empty, malformed or easy to guess.

    A token must be printable ASCII (no space, tab, newline or other control character: it
    travels in an HTTP header, and a stray newline pasted with it would never match), at least
    :data:`MIN_TOKEN_LENGTH` characters long and made of at least :data:`MIN_TOKEN_VARIETY`
    different characters (``aaaa...`` or ``abab...`` are refused whatever their length).

    Parameters
    ----------
    token : str
        The token; it never appears in the message.
    where : str
        Where it came from, for the message (e.g. ``"in WFKIT_API_TOKEN"``).

    Raises
    ------
    UsageError
        Saying what is wrong with the token and how to make a good one.

    Examples
    --------
    >>> check_token("kK3p-9xQe_Vt2LmZ0sWa")
    >>> check_token("0123012301230123")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    wfkit.errors.UsageError: the API token given has only 4 different characters; ...
    """
    if not token:
        raise UsageError(
            f"the API token {where} is empty; set {TOKEN_ENV} to a token made with {MAKE_ONE}, "
            "or leave it unset and wfkit serve makes one and prints it"
        )
    weakness = _weakness(token)
    if weakness is not None:
        raise UsageError(
            f"the API token {where} {weakness}; use a token made with {MAKE_ONE}, or leave "
            f"{TOKEN_ENV} unset and wfkit serve makes one and prints it"
        )


def _weakness(token: str) -> str | None:
    """What makes ``token`` unfit, as words that follow "the API token", or None."""
    bad = next((i for i, ch in enumerate(token) if not "!" <= ch <= "~"), None)
    if bad is not None:
        return (
            f"contains {_kind(token[bad])} (character {bad + 1} of {len(token)}); a token "
            "travels in an HTTP header: printable ASCII only, no spaces"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        length = f"{len(token)} character{'s' if len(token) != 1 else ''}"
        return f"is {length} long; it needs at least {MIN_TOKEN_LENGTH}"
    variety = len(set(token))
    if variety == 1:
        return "is one character repeated: anyone can guess it"
    if variety < MIN_TOKEN_VARIETY:
        return (
            f"has only {variety} different characters; it needs at least {MIN_TOKEN_VARIETY}, "
            "or it is easy to guess"
        )
    return None


def _kind(ch: str) -> str:
    if ch.isspace():
        return "whitespace"
    if unicodedata.category(ch).startswith("C"):
        return "a control character"
    return "a character that is not ASCII"


def resolve_token(token: str | None = None) -> tuple[str, bool]:
    """The token to use and whether it was generated (so the caller prints it once).

    Raises ``UsageError`` when the given or ``WFKIT_API_TOKEN``'s token is weak
    (:func:`check_token`).
    """
    if token:
        check_token(token)
        return token, False
    chosen = os.environ.get(TOKEN_ENV, "")
    if chosen:  # spaces, a trailing newline included, are refused: clients would send them
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
