"""``create_app``: the FastAPI application serving one engine under ``/api/v1``."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

import wfkit
from wfkit.api.auth import PUBLIC_PATHS, TokenMiddleware, check_token
from wfkit.api.errors import install_handlers
from wfkit.api.headers import SecurityHeadersMiddleware
from wfkit.api.limits import BodyLimitMiddleware, body_limit
from wfkit.api.metrics import METRICS_PATH, install_metrics
from wfkit.api.models import Problem
from wfkit.api.routes import public, secured
from wfkit.engine import Engine

__all__ = ["API_PREFIX", "create_app", "new_server_id"]

API_PREFIX = "/api/v1"

_DESCRIPTION = """\
Signals, approvals, runs and recovery for a wfkit engine.

Every route but `/health` (and this document) needs `Authorization: Bearer <token>`. Errors are
RFC 9457 problem documents (`application/problem+json`). Request bodies are limited in size:
a payload (signal payload, run data) may be as large as the engine accepts (256 KiB of JSON by
default), and the body around it 64 KiB more.
"""


def new_server_id() -> str:
    """A random id naming one server process (128 bits, hex); public, not a secret."""
    return secrets.token_hex(16)


def create_app(
    engine: Engine,
    token: str,
    *,
    max_body: int | None = None,
    docs: bool = False,
    metrics_public: bool = False,
    server_id: str | None = None,
) -> FastAPI:
    """The HTTP API over ``engine``, guarded by the bearer ``token``.

    Parameters
    ----------
    engine : Engine
        The engine to serve; the caller starts its workers and closes it.
    token : str
        The bearer token every route but health needs (see :func:`wfkit.api.auth.check_token`:
        16 characters or more, at least 8 different ones, printable ASCII).
    max_body : int, optional
        Largest request body accepted, in bytes; by default the engine's ``max_payload`` plus
        64 KiB for the JSON around a payload.
    docs : bool
        Serve Swagger UI at ``/api/v1/docs``. Off by default: the page loads its scripts from a
        CDN, so the browser needs internet. The OpenAPI document is always at
        ``/api/v1/openapi.json``.
    metrics_public : bool
        Serve ``GET /metrics`` (Prometheus) without the token; behind it by default.
    server_id : str, optional
        The id ``GET /health`` answers with, which names this server process (``wfkit serve``
        also writes it into ``<db>.server.json``, so the command line can tell its server from
        another at the same address); a random one by default. It is no secret.

    Returns
    -------
    FastAPI
        Serve it with uvicorn, or test it with ``fastapi.testclient.TestClient``.

    Raises
    ------
    UsageError
        When the token is empty or weak (too short, too few different characters, spaces or
        control characters).

    Examples
    --------
    >>> import wfkit as wf
    >>> with wf.Engine(":memory:") as engine:
    ...     app = create_app(engine, "kK3p-9xQe_Vt2LmZ0sWa")
    ...     sorted(app.openapi()["paths"])[:2]
    ['/api/v1/health', '/api/v1/runs']
    """
    check_token(token)
    docs_url = f"{API_PREFIX}/docs" if docs else None
    redirect_url = f"{docs_url}/oauth2-redirect" if docs_url else None
    app = FastAPI(
        title="wfkit",
        version=wfkit.__version__,
        description=_DESCRIPTION,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=docs_url,
        swagger_ui_oauth2_redirect_url=redirect_url,
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.token = token
    app.state.server_id = server_id or new_server_id()
    install_handlers(app)
    app.include_router(public)
    app.include_router(secured)
    install_metrics(app, engine)
    limit = body_limit(engine.max_payload) if max_body is None else max_body
    app.add_middleware(BodyLimitMiddleware, max_body=limit)
    open_paths = PUBLIC_PATHS | {METRICS_PATH} if metrics_public else PUBLIC_PATHS
    app.add_middleware(TokenMiddleware, token=token, public=open_paths)  # before the body is read
    # outermost: refusals (401, 413) carry the headers too; the docs page loads a CDN's scripts
    pages = [url for url in (docs_url, redirect_url) if url]
    app.add_middleware(SecurityHeadersMiddleware, exempt=pages)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, plus the problem schema the error responses point at."""
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}))
        schemas["Problem"] = problem
        app.openapi_schema = document
    return app.openapi_schema
