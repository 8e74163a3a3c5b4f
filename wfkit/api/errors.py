"""Problem documents (RFC 9457): every error the HTTP API returns, in one shape.

A problem is ``application/problem+json`` with ``type``, ``title``, ``status`` and ``detail``
(what happened and what to do next), plus ``instance`` (the request path) and, where they apply,
``errors`` (each invalid field) or ``reasons`` (each reason a run was refused).
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from wfkit.api.models import FieldError, Problem
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.values import MAX_DEPTH, TOO_DEEP
from wfkit.errors import (
    AdmissionError,
    DefinitionError,
    SignalError,
    StoreError,
    UsageError,
    WfkitError,
)

__all__ = [
    "PROBLEM_JSON",
    "ApiProblem",
    "install_handlers",
    "problem_body",
    "problem_response",
]

PROBLEM_JSON = "application/problem+json"

log = logging.getLogger("wfkit.api")


class ProblemResponse(JSONResponse):
    """A JSON response served as ``application/problem+json``."""

    media_type = PROBLEM_JSON


class ApiProblem(Exception):
    """Raised by routes to answer with a problem document.

    Parameters
    ----------
    status : int
        The HTTP status.
    slug : str
        The problem type's short name; the ``type`` is ``urn:wfkit:problem:<slug>``.
    detail : str
        What happened and what to do next.
    """

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        reasons: Sequence[str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.reasons = list(reasons) if reasons is not None else None
        self.headers = dict(headers or {})


def problem_body(
    status: int,
    detail: str,
    *,
    slug: str | None = None,
    instance: str | None = None,
    errors: list[FieldError] | None = None,
    reasons: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON of one problem document (``None`` members left out)."""
    problem = Problem(
        type=f"urn:wfkit:problem:{slug}" if slug else "about:blank",
        title=_title(status),
        status=status,
        detail=detail,
        instance=instance,
        errors=errors,
        reasons=reasons,
    )
    return problem.model_dump(mode="json", exclude_none=True)


def problem_response(
    status: int,
    detail: str,
    *,
    slug: str | None = None,
    instance: str | None = None,
    errors: list[FieldError] | None = None,
    reasons: list[str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem document as a response."""
    body = problem_body(
        status, detail, slug=slug, instance=instance, errors=errors, reasons=reasons
    )
    return ProblemResponse(body, status_code=status, headers=dict(headers or {}))


def _title(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _field_errors(exc: RequestValidationError) -> list[FieldError]:
    found = []
    for error in exc.errors():
        loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
        found.append(FieldError(loc=loc, msg=str(error.get("msg", "")), type=str(error["type"])))
    return found


def _describe(errors: list[FieldError]) -> str:
    shown = [f"{'.'.join(map(str, e.loc)) or 'request'}: {e.msg}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return (
        "the request is not valid: " + "; ".join(shown) + more + "; fix the fields listed in "
        "'errors' and send it again (the OpenAPI document at /api/v1/openapi.json has the schema)"
    )


def install_handlers(app: FastAPI) -> None:
    """Make every error ``app`` answers a problem document."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return problem_response(
            exc.status,
            exc.detail,
            slug=exc.slug,
            instance=request.url.path,
            reasons=exc.reasons,
            headers=exc.headers,
        )

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = _field_errors(exc)
        return problem_response(
            422,
            _describe(errors),
            slug="invalid-request",
            instance=request.url.path,
            errors=errors,
        )

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
            # the JSON parser gave up on the body's nesting (about 1,000 levels); shallower
            # bodies reach the routes, which refuse values deeper than 64 levels by their path
            return problem_response(
                400,
                f"the request body is {TOO_DEEP} (the values wfkit stores nest at most "
                f"{MAX_DEPTH} levels deep); flatten it and send it again",
                slug="too-deep",
                instance=request.url.path,
            )
        return problem_response(
            exc.status_code,
            _http_detail(exc.status_code, exc.detail, request),
            instance=request.url.path,
            headers=exc.headers,
        )

    async def on_wfkit(request: Request, exc: Exception) -> JSONResponse:
        status, slug, reasons = _classify(exc)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
        return problem_response(
            status,
            " ".join(str(exc).split()),
            slug=slug,
            instance=request.url.path,
            reasons=reasons,
        )

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s crashed", request.method, request.url.path, exc_info=exc)
        return problem_response(
            500,
            f"the server failed on {request.method} {request.url.path} "
            f"({type(exc).__name__}); the error is in the server's log — report it, "
            "then retry the request",
            slug="internal-error",
            instance=request.url.path,
        )

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(WfkitError, on_wfkit)
    app.add_exception_handler(Exception, on_crash)


def _classify(exc: Exception) -> tuple[int, str, list[str] | None]:
    """Status, problem slug and reasons for a wfkit error a route let through."""
    if isinstance(exc, AdmissionError):
        return 400, "run-refused", exc.reasons
    if isinstance(exc, DefinitionError):
        return 400, "invalid-definition", [str(p) for p in exc.problems] or None
    if isinstance(exc, SignalError):
        return 422, "signal-refused", None
    if isinstance(exc, UsageError):
        return 409, "state-conflict", None
    if isinstance(exc, StoreError):
        return 503, "store-unavailable", None
    if isinstance(exc, RenderingUnavailable):
        return 503, "rendering-unavailable", None
    return 500, "internal-error", None


def _http_detail(status: int, detail: Any, request: Request) -> str:
    if status == 404:
        return (
            f"there is no resource at {request.url.path}; the routes are listed in the OpenAPI "
            "document at /api/v1/openapi.json"
        )
    if status == 405:
        return (
            f"{request.method} is not allowed on {request.url.path}; the OpenAPI document at "
            "/api/v1/openapi.json lists the methods each route takes"
        )
    if status == 400:
        return (
            f"the request body cannot be read ({detail}); send a UTF-8 JSON object as the "
            "OpenAPI document at /api/v1/openapi.json describes"
        )
    return str(detail) if detail else _title(status)
