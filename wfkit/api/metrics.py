"""``GET /metrics``: the engine's Prometheus metrics, in the text exposition format.

The route is behind the API's bearer token like every other one, unless the server was started
with ``--metrics-public`` (a Prometheus on the same host or network then scrapes it without the
token). The metrics themselves, and their names, are described in :mod:`wfkit.engine.metrics`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from wfkit.engine import Engine
from wfkit.engine.metrics import enable_metrics
from wfkit.errors import UsageError

__all__ = ["METRICS_PATH", "install_metrics"]

METRICS_PATH = "/metrics"


def install_metrics(app: FastAPI, engine: Engine) -> None:
    """Serve ``engine``'s metrics at :data:`METRICS_PATH`, counting from now on.

    Without ``prometheus_client`` the route answers 501 with the extra to install, and the
    engine keeps no counters.
    """
    try:
        enable_metrics(engine.runtime)
        missing = ""
    except UsageError as exc:
        missing = str(exc)

    @app.get(METRICS_PATH, include_in_schema=False)
    def metrics(request: Request) -> Response:
        """The metrics of the engine this server serves (Prometheus text format)."""
        if missing:
            return Response(missing + "\n", status_code=501, media_type="text/plain")
        body, content_type = enable_metrics(request.app.state.engine.runtime).exposition()
        return Response(body, media_type=content_type)
