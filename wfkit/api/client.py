"""``ApiClient``: the engine's operator calls, sent to a running ``wfkit serve`` over HTTP.

The command line uses it when a server holds the DuckDB file. Its methods mirror the engine's
(``signal``, ``post_signal``, ``approve``, ``cancel``, ``recover_compensation``) and raise the same
wfkit errors, carrying the server's problem ``detail``. Standard library only (urllib), no proxy
and no redirect: the server is reached directly, and the token goes nowhere else.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from wfkit.api.app import API_PREFIX
from wfkit.engine.cancellation import CancelResult
from wfkit.engine.records import RunStatus
from wfkit.errors import AdmissionError, SignalError, StoreError, UsageError, WfkitError

__all__ = ["ApiClient", "NoServer"]


class NoServer(StoreError):
    """Nothing answers at the server's URL, or what answers is not a wfkit server."""


class _Stay(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: urllib would send the token to wherever one points. The API never
    redirects; an answer that does is an error (HTTP 3xx)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ApiClient:
    """A client of one wfkit server.

    Parameters
    ----------
    url : str
        The server's base URL, e.g. ``http://127.0.0.1:8000``.
    token : str
        Its bearer token.
    timeout : float
        Seconds to wait for an answer.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Stay())

    def __repr__(self) -> str:
        return f"ApiClient({self.url!r})"

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request to ``/api/v1`` + ``path``; the decoded JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}{API_PREFIX}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json, application/problem+json",
            },
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StoreError(
                f"cannot reach the wfkit server at {self.url} ({reason}); check that "
                "'wfkit serve' is still running, or stop it to use the file directly"
            ) from exc

    def health(self) -> dict[str, Any]:
        """``GET /health``, without the token (anyone may ask): the server's version and workflows.

        Raises
        ------
        NoServer
            When nothing answers at the URL, or what answers is not a wfkit server.
        StoreError
            When the wfkit server answers that it is unwell (its store is unavailable).
        """
        req = urllib.request.Request(
            f"{self.url}{API_PREFIX}/health", headers={"Accept": "application/json"}
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as answer:
                found = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            try:
                problem = json.loads(exc.read() or b"{}")
            except ValueError:
                problem = {}
            if isinstance(problem, dict) and str(problem.get("type", "")).startswith(_PROBLEM):
                raise StoreError(
                    f"the wfkit server at {self.url} is unwell: {problem.get('detail')}"
                ) from None
            raise NoServer(
                f"what answers at {self.url} is not a wfkit server (HTTP {exc.code} {exc.reason})"
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise NoServer(f"nothing answers at {self.url} ({reason})") from exc
        except ValueError:
            raise NoServer(
                f"what answers at {self.url} is not a wfkit server (its answer is not JSON)"
            ) from None
        if not isinstance(found, dict) or not {"version", "workflows"} <= found.keys():
            raise NoServer(f"what answers at {self.url} is not a wfkit server")
        return found

    # --- the engine's operator calls ------------------------------------------------------------

    def signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        actor: str | None = None,
    ) -> bool:
        """Like :meth:`Engine.signal`: True when a waiting run took the signal."""
        answer = self.request(
            "POST", _signal_path(name, key), {"payload": payload or {}, "actor": actor}
        )
        return bool(answer["delivered"])

    def post_signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        expires: str | None = "1d",
        actor: str | None = None,
    ) -> bool:
        """Like :meth:`Engine.post_signal`: True when delivered now, False when kept."""
        body = {
            "payload": payload or {},
            "actor": actor,
            "post_if_absent": True,
            "expires": expires,
        }
        return bool(self.request("POST", _signal_path(name, key), body)["delivered"])

    def approve(
        self,
        run_id: str,
        node: str,
        approved: bool = True,
        *,
        actor: str | None = None,
        comment: str | None = None,
        loop_path: Sequence[int] | None = None,
    ) -> None:
        """Like :meth:`Engine.approve`."""
        body: dict[str, Any] = {
            "approved": approved,
            "actor": actor or "wfkit-cli",
            "comment": comment,
        }
        if loop_path is not None:
            body["loop_path"] = list(loop_path)
        self.request("POST", f"/runs/{_seg(run_id)}/approvals/{_seg(node)}", body)

    def cancel(self, run_id: str, actor: str | None = None, reason: str = "") -> CancelResult:
        """Like :meth:`Engine.cancel`."""
        body = {"actor": actor or "wfkit-cli", "reason": reason}
        done = self.request("POST", f"/runs/{_seg(run_id)}/cancel", body)
        return CancelResult(
            str(done["run_id"]),
            int(done["pending_cancelled"]),
            int(done["attempts_stopping"]),
            bool(done["already_ended"]),
            RunStatus(done["status"]),
        )

    def recover_compensation(
        self, run_id: str, action: str = "retry", *, actor: str | None = None
    ) -> None:
        """Like :meth:`Engine.recover_compensation`."""
        body = {"action": action, "actor": actor or "wfkit-cli"}
        self.request("POST", f"/runs/{_seg(run_id)}/recover", body)

    def retry(self, run_id: str, *, actor: str | None = None) -> None:
        """Like :meth:`Engine.retry`."""
        body = {"actor": actor or "wfkit-cli"}
        self.request("POST", f"/runs/{_seg(run_id)}/retry", body)

    def deactivate(self, workflow_id: str, version: int) -> None:
        """Like :meth:`Engine.deactivate`."""
        self.request("POST", f"/workflows/{_seg(workflow_id)}/{int(version)}/deactivate")

    def activate(self, workflow_id: str, version: int) -> None:
        """Like :meth:`Engine.activate`."""
        self.request("POST", f"/workflows/{_seg(workflow_id)}/{int(version)}/activate")

    def active_versions(self, workflow_id: str) -> list[int]:
        """The versions of ``workflow_id`` that take new runs."""
        found = self.request("GET", f"/workflows/{_seg(workflow_id)}")
        return [int(v["version"]) for v in found["versions"] if v["active"]]

    def status(self, run_id: str) -> str:
        """The run's status."""
        return str(self.request("GET", f"/runs/{_seg(run_id)}")["status"])


_PROBLEM = "urn:wfkit:problem:"


def _seg(text: str) -> str:
    return quote(str(text), safe="")


def _signal_path(name: str, key: Any) -> str:
    return f"/signals/{_seg(name)}" + ("" if key is None else f"/{_seg(str(key))}")


def _error(exc: urllib.error.HTTPError) -> WfkitError:
    """The wfkit error for a problem document the server answered with."""
    try:
        problem = json.loads(exc.read() or b"{}")
    except ValueError:
        problem = {}
    detail = str(problem.get("detail") or f"HTTP {exc.code} {exc.reason}")
    kind = str(problem.get("type", ""))
    if exc.code == 401:
        return UsageError(f"the server refused the token ({detail})")
    if exc.code == 400 and kind.endswith(":run-refused"):
        return AdmissionError(detail, problem.get("reasons") or [])
    if kind.endswith((":signal-refused", ":no-open-approval")):
        return SignalError(detail)
    if exc.code >= 500:
        return StoreError(f"the server failed: {detail}")
    return UsageError(detail)
