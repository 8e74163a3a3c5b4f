"""What the tests of ``wfkit serve`` processes share: the server's environment, polling, a
``wfkit serve`` started from the command line, and a spy that pretends to be a wfkit server."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.polling import wait_until

WFKIT = Path(sys.executable).parent / "wfkit"


def server_env(token: str) -> dict[str, str]:
    """The environment of a ``wfkit serve`` under test: its API token, plain wide output."""
    return {**os.environ, "WFKIT_API_TOKEN": token, "NO_COLOR": "1", "COLUMNS": "400"}


@contextmanager
def serving(db: str, log: Path, token: str, *flags: str) -> Iterator[str]:
    """``wfkit serve --db db --port 0 *flags`` until the block ends; its base URL, read from the
    line it prints once it listens. It must stop cleanly on SIGTERM, without a traceback."""
    command = [str(WFKIT), "serve", "--db", db, "--port", "0", "--no-access-log", *flags]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=server_env(token)
        )
    try:

        def started() -> str | None:
            assert process.poll() is None, f"wfkit serve exited:\n{log.read_text()}"
            found = re.search(r"^wfkit serve: (http://\S+)/api/v1 ", log.read_text(), re.M)
            return found.group(1) if found else None

        yield wait_until(started, "wfkit serve to listen", timeout=30)
    finally:
        process.terminate()
        code = process.wait(timeout=30)
        text = log.read_text()
        assert code == 0, text
        assert "Traceback" not in text, text


@dataclass
class Request:
    """One request a :class:`Spy` received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Spy:
    """A web server on 127.0.0.1 that answers like a wfkit server and records every request:
    what a server file planted by someone else would name."""

    url: str
    server_id: str
    requests: list[Request] = field(default_factory=list)

    def saw(self, text: str) -> bool:
        """Whether ``text`` reached the spy anywhere: a path, a header or a body."""
        return any(
            text in r.path or text in " ".join(r.headers.values()) or text.encode() in r.body
            for r in self.requests
        )


@contextmanager
def spy_server(server_id: str, redirect: str | None = None) -> Iterator[Spy]:
    """A :class:`Spy` whose ``/health`` answers with ``server_id`` and every POST with
    ``{"delivered": true}``, as the fake server of the security report did; with ``redirect``,
    every request is answered with a 302 to the same path at that URL instead."""
    spy = Spy("", server_id)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            headers = {k.lower(): v for k, v in self.headers.items()}
            spy.requests.append(Request(self.command, self.path, headers, self.rfile.read(size)))
            if redirect is not None:
                self.send_response(302)
                self.send_header("Location", f"{redirect}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            answer: dict[str, Any] = {"delivered": True}
            if self.path.endswith("/health"):
                answer = {"status": "ok", "version": "0", "workflows": {}, "server_id": server_id}
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    spy.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield spy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def plant(path: Path, mode: int = 0o600, **fields: Any) -> Path:
    """Write ``fields`` as JSON to ``path`` with ``mode``, as someone other than a server might."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(fields, out)
    path.chmod(mode)
    return path
