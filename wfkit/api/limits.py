"""Request body size limit: an ASGI middleware that refuses oversize bodies with a 413.

It checks ``Content-Length`` first, then counts the bytes as they stream in (a chunked body
has no length to trust), and only hands the body on once it is whole and within the limit, so
a route never sees part of a body.

The limit leaves room around the largest payload the engine accepts (``max_payload``, 256 KiB
by default): a body may be the payload plus :data:`ENVELOPE_ALLOWANCE` for the JSON around it
(``{"payload": ..., "actor": ...}``). The routes check the payload itself against the engine's
limit and answer 413 when it is over.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wfkit.api.errors import problem_response
from wfkit.definition.validation import DEFAULT_MAX_PAYLOAD

__all__ = ["DEFAULT_MAX_BODY", "ENVELOPE_ALLOWANCE", "BodyLimitMiddleware", "body_limit"]

ENVELOPE_ALLOWANCE = 64 * 1024
"""Bytes a request body may hold beyond the largest payload: the JSON around the payload."""

DEFAULT_MAX_BODY = DEFAULT_MAX_PAYLOAD + ENVELOPE_ALLOWANCE
"""Largest request body accepted by default, in bytes (320 KiB: 256 KiB of payload + 64 KiB)."""


def body_limit(max_payload: int) -> int:
    """The body limit for an engine that accepts payloads of up to ``max_payload`` bytes."""
    return max_payload + ENVELOPE_ALLOWANCE


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_body`` bytes with a 413 problem document."""

    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_BODY) -> None:
        if max_body < 0:
            raise ValueError(f"max_body must be zero or more bytes, not {max_body}")
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                await self._refuse(
                    scope,
                    receive,
                    send,
                    400,
                    f"the Content-Length header {declared.decode('latin-1')!r} is not a number "
                    "of bytes; send the body's length in bytes, or leave the header out",
                )
                return
            if length > self.max_body:
                await self._too_large(scope, receive, send, length)
                return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left; nobody is waiting for an answer
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await self._too_large(scope, receive, send, None)
                return
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _too_large(
        self, scope: Scope, receive: Receive, send: Send, size: int | None
    ) -> None:
        said = f"{size:,} bytes" if size is not None else "more than that"
        await self._refuse(
            scope,
            receive,
            send,
            413,
            f"the request body is {said}; this server accepts at most {self.max_body:,} bytes "
            "(wfkit serve --max-body); send a smaller body, e.g. keep large documents elsewhere "
            "and pass a reference",
        )

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, detail: str
    ) -> None:
        slug = "body-too-large" if status == 413 else "bad-request"
        response = problem_response(
            status, detail, slug=slug, instance=scope["path"], headers={"Connection": "close"}
        )
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the buffered body once, then the client's later messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
