"""Security headers on every response: no MIME sniffing, and a content policy that lets a page
served by the API (the run pictures are SVG documents) load and run nothing.

``Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src data:`` still
renders Graphviz's SVG (inline styles and attributes), but a script or a link to another origin
that found its way into a picture does nothing. The Swagger UI page (``/api/v1/docs``, only when
enabled) loads its scripts from a CDN, so it is served without the policy.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SecurityHeadersMiddleware"]

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class SecurityHeadersMiddleware:
    """Add ``X-Content-Type-Options: nosniff`` and the content policy to every response.

    Parameters
    ----------
    app : ASGIApp
        The application.
    exempt : collection of str
        Paths served without the content policy (pages that load their own scripts).
    """

    def __init__(self, app: ASGIApp, exempt: Collection[str] = ()) -> None:
        self.app = app
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = scope["path"] not in self.exempt

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if policy:
                    headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
            await send(message)

        await self.app(scope, receive, send_with_headers)
