"""``create_app``: the FastAPI application serving one engine under ``/api/v1``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

import wfkit
from wfkit.api.auth import TokenMiddleware
from wfkit.api.errors import install_handlers
from wfkit.api.limits import DEFAULT_MAX_BODY, BodyLimitMiddleware
from wfkit.api.models import Problem
from wfkit.api.routes import public, secured
from wfkit.engine import Engine
from wfkit.errors import UsageError

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"

_DESCRIPTION = """\
Signals, approvals, runs and recovery for a wfkit engine.

Every route but `/health` (and this document) needs `Authorization: Bearer <token>`. Errors are
RFC 9457 problem documents (`application/problem+json`). Request bodies are limited in size.
"""


def create_app(engine: Engine, token: str, *, max_body: int = DEFAULT_MAX_BODY) -> FastAPI:
    """The HTTP API over ``engine``, guarded by the bearer ``token``.

    Parameters
    ----------
    engine : Engine
        The engine to serve; the caller starts its workers and closes it.
    token : str
        The bearer token every route but health needs.
    max_body : int
        Largest request body accepted, in bytes (256 KiB by default).

    Returns
    -------
    FastAPI
        Serve it with uvicorn, or test it with ``fastapi.testclient.TestClient``.

    Raises
    ------
    UsageError
        When the token is empty.

    Examples
    --------
    >>> import wfkit as wf
    >>> with wf.Engine(":memory:") as engine:
    ...     app = create_app(engine, "s3cret")
    ...     sorted(app.openapi()["paths"])[:2]
    ['/api/v1/health', '/api/v1/runs']
    """
    if not token or not token.strip():
        raise UsageError(
            "the API token is empty; set WFKIT_API_TOKEN or pass a token (wfkit serve makes one)"
        )
    app = FastAPI(
        title="wfkit",
        version=wfkit.__version__,
        description=_DESCRIPTION,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        swagger_ui_oauth2_redirect_url=f"{API_PREFIX}/docs/oauth2-redirect",
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.token = token
    install_handlers(app)
    app.include_router(public)
    app.include_router(secured)
    app.add_middleware(BodyLimitMiddleware, max_body=max_body)
    app.add_middleware(TokenMiddleware, token=token)  # added last, so it runs first
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
