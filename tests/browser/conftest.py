"""Real-browser fixtures: a fresh Voila server per test module and a headless system chromium.

How a browser test works:

1. The test writes a notebook into its own ``tmp_path`` (:meth:`Notebook.write`). The notebook's
   first cell defines ``record(**state)``, which writes the kernel-side truth to a JSON file on
   every change, and catches every exception the kernel would otherwise swallow (widget callbacks,
   comm handlers, background threads) into ``state["errors"]``.
2. :meth:`VoilaServer.open` loads that notebook as a page in chromium and waits for a CSS selector.
3. The test clicks and drags with playwright, then polls the JSON file (:meth:`Notebook.wait_for`):
   a click handler that raises in the kernel is silent in the page, so the page alone proves little.
4. When the test ends, the fixtures fail it if the page logged an error (other than a resource from
   another host, which cannot load offline and is never wfkit's own code) or if the kernel recorded
   an exception.

Servers and browsers are started as this machine allows (see BROWSER-TESTING.md): Debian's
``/usr/bin/chromium`` through playwright (never ``playwright install``); Voila on a free port of
127.0.0.1 with ``port_retries=0`` so a busy port fails instead of silently moving the server; the
readiness probe lists the server's folder (``/voila/api/contents``), which never executes a
notebook.

Without chromium (or playwright) the tests are skipped with the reason, unless ``CI`` is set: then
they fail, so a CI machine can never pass without having run them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import nbformat
import pytest

from tests.browser.jupyterlab import LabServer, end_process, log_tail

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Page

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
SERVER_START_TIMEOUT = 60.0
PAGE_TIMEOUT_MS = 60_000
"""How long a page may take to execute its notebook and show the widget (about 4 s here)."""
STATE_TIMEOUT = 30.0
"""How long a test waits for the kernel-side state to reach what it expects."""
VIEWPORT = {"width": 1280, "height": 900}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> tuple[str | None, str]:
    """The chromium to drive, or None with the reason: ``$WFKIT_CHROMIUM`` when set (and then
    only that), else Debian's ``/usr/bin/chromium``, else ``chromium`` on the PATH."""
    chosen = os.environ.get("WFKIT_CHROMIUM")
    if chosen:
        if os.access(chosen, os.X_OK):
            return chosen, ""
        return None, f"WFKIT_CHROMIUM={chosen} is not an executable file"
    for found in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if found and os.access(found, os.X_OK):
            return found, ""
    return None, (
        "no chromium found (/usr/bin/chromium, PATH): run scripts/ensure-browser.sh "
        "(apt-get install chromium) or set WFKIT_CHROMIUM"
    )


def unavailable(reason: str) -> None:
    """Skip the browser tests for ``reason``; fail instead when running in CI."""
    if in_ci():
        pytest.fail(f"CI is set, so the browser tests must run, but {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the kernel side ------------------------------------------------------------------------

PRELUDE = '''\
# Test harness: record(**changes) writes the kernel-side state to a JSON file on every change;
# watch(snapshot) records snapshot() whenever it changes, until the test is over; every exception
# the kernel would swallow is recorded under "errors".
import json, logging, os, sys, threading, time, traceback

STATE_PATH = "__STATE_PATH__"
TMP = "__TMP__"


def finished(_flag=os.path.join(TMP, "test-over"), _exists=os.path.exists):
    """True once the test is over (the test's fixture writes the flag file)."""
    return _exists(_flag)


_state = {"python": sys.executable, "errors": [], "seq": 0}
_lock = threading.RLock()


def record(**changes):
    with _lock:
        _state.update(changes)
        _state["seq"] += 1
        part = STATE_PATH + ".part"
        with open(part, "w") as out:
            json.dump(_state, out, default=str, indent=1)
        os.replace(part, STATE_PATH)


def record_error(text):
    with _lock:
        _state["errors"].append(text)
    record()


_ip = get_ipython()
_showtraceback = _ip.showtraceback


def _recording_showtraceback(*args, **kwargs):  # ipywidgets callbacks (on_click, ...) end here
    record_error(traceback.format_exc())
    return _showtraceback(*args, **kwargs)


_ip.showtraceback = _recording_showtraceback


class _ErrorLog(logging.Handler):  # comm handlers (trait changes from the page) log errors here
    def emit(self, rec):
        text = rec.getMessage()
        if rec.exc_info:
            text += "\\n" + "".join(traceback.format_exception(*rec.exc_info))
        record_error(f"{rec.name}: {text}")


for _name in ("", "IPKernelApp", "ipykernel", "comm", "traitlets", "wfkit"):
    logging.getLogger(_name).addHandler(_ErrorLog(logging.ERROR))
logging.getLogger("wfkit.widgets").addHandler(_ErrorLog(logging.WARNING))  # e.g. unknown messages


def _thread_error(args, _record=record_error, _format=traceback.format_exception):
    if finished():
        return  # the test is over and the kernel is going away: nothing left to report to
    _record("".join(_format(args.exc_type, args.exc_value, args.exc_traceback)))


threading.excepthook = _thread_error


def watch(snapshot, interval=0.1):
    """Record snapshot() (a dict) from a daemon thread whenever it changes."""

    def loop():
        last = None
        while not finished():
            now = snapshot()
            if now != last:
                record(**now)
                last = now
            time.sleep(interval)

    threading.Thread(target=loop, name="test-watch", daemon=True).start()


def run_state(run):
    """What the engine says about one run: status, node statuses, events (kind, node, actor)."""
    return {
        "status": run.status.value,
        "nodes": run.node_statuses(),
        "events": [
            {"kind": e.kind, "node": e.node_id, "actor": e.actor, "output": e.output}
            for e in run.history()
        ],
        "data": run.data,
        "outputs": run.outputs,
    }


record(phase="started")
'''


@dataclass
class Notebook:
    """A notebook a test writes into its ``tmp_path``, and the state file its kernel writes."""

    folder: Path
    name: str = "page.ipynb"

    @property
    def path(self) -> Path:
        return self.folder / self.name

    @property
    def state_path(self) -> Path:
        return self.folder / "state.json"

    def write(self, *cells: str) -> Path:
        """Write the harness prelude and ``cells`` (code, dedented) as a python3 notebook."""
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        prelude = PRELUDE.replace("__STATE_PATH__", json.dumps(str(self.state_path))[1:-1])
        prelude = prelude.replace("__TMP__", json.dumps(str(self.folder))[1:-1])
        nb.cells = [nbformat.v4.new_code_cell(prelude)]
        nb.cells += [nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in cells]
        nbformat.validate(nb)
        nbformat.write(nb, self.path)
        return self.path

    def state(self) -> dict[str, Any]:
        """The latest state the kernel wrote ({} before the first write)."""
        try:
            return dict(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            return {}

    def wait_for(
        self,
        check: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = STATE_TIMEOUT,
    ) -> dict[str, Any]:
        """Poll the kernel-side state until ``check(state)`` holds; fail saying ``what``."""
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while True:
            state = self.state()
            if state.get("errors"):
                pytest.fail(
                    f"the kernel raised while waiting for {what}:\n" + "\n".join(state["errors"]),
                    pytrace=False,
                )
            try:
                if state and check(state):
                    return state
            except (KeyError, IndexError, TypeError):
                pass  # not there yet
            if time.monotonic() > deadline:
                shown = json.dumps(state, indent=1, default=str)[:4000]
                pytest.fail(
                    f"kernel state never showed {what} within {timeout:.0f} s; last state:\n"
                    f"{shown}",
                    pytrace=False,
                )
            time.sleep(0.1)


@pytest.fixture
def notebook(tmp_path: Path) -> Iterator[Notebook]:
    """This test's notebook; the test fails if its kernel recorded an exception."""
    nb = Notebook(tmp_path)
    yield nb
    (tmp_path / "test-over").touch()  # stops the kernel's watcher threads (Voila keeps kernels)
    errors = nb.state().get("errors")
    if errors:
        pytest.fail("the kernel raised:\n" + "\n".join(errors), pytrace=False)


# --- the server -------------------------------------------------------------------------------


@dataclass
class VoilaServer:
    """One Voila process serving every notebook under ``root`` at ``/voila/render/...``."""

    root: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, marker: str) -> None:
        """Start Voila and wait until it lists the folder ``marker`` (so it is this server)."""
        began = time.monotonic()
        env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "voila",
                    str(self.root),
                    "--no-browser",
                    f"--port={self.port}",
                    "--Voila.port_retries=0",
                    "--Voila.ip=127.0.0.1",
                    "--VoilaConfiguration.show_tracebacks=True",
                    # Notebook 7's own JupyterLab extension (installed for the Notebook 7 tests)
                    # does not load in a Voila page: "The getter for the shared module is not a
                    # function" (#RUNTIME-012); Voila needs only the widget managers
                    "--VoilaConfiguration.extension_denylist=['@jupyter-notebook/lab-extension']",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=env,
            )
        deadline = began + SERVER_START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"Voila exited with {self.process.returncode} before serving:\n{self.tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base}/voila/api/contents", timeout=2) as reply:
                    if marker in reply.read().decode("utf-8", "replace"):
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Voila not ready in {SERVER_START_TIMEOUT:.0f} s:\n{self.tail()}"
                )
            time.sleep(0.1)
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            end_process(self.process, timeout=15)

    def tail(self) -> str:
        return log_tail(self.log)

    def url(self, notebook: Path) -> str:
        relative = notebook.resolve().relative_to(self.root.resolve())
        return f"{self.base}/voila/render/{quote(relative.as_posix())}"

    def open(self, page: Page, notebook: Notebook, ready: str) -> None:
        """Load ``notebook`` as a page and wait until ``ready`` (a CSS selector) is visible."""
        page.goto(self.url(notebook.path), wait_until="domcontentloaded")
        try:
            page.locator(ready).first.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
        except Exception as exc:
            body = page.locator("body").inner_text()[-3000:]
            pytest.fail(
                f"{ready!r} never appeared on {notebook.path.name}: {exc}\n"
                f"kernel state: {notebook.state()}\npage text:\n{body}\nVoila log:\n{self.tail()}",
                pytrace=False,
            )


@pytest.fixture(scope="module")
def voila(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[VoilaServer]:
    """A fresh Voila server for this test module, serving the session's temporary folder (so
    every test's ``tmp_path`` notebook is reachable) and importing the wfkit checked out here."""
    marker = f"voila-{uuid.uuid4().hex[:12]}"
    own = tmp_path_factory.mktemp(marker)
    server = VoilaServer(
        root=tmp_path_factory.getbasetemp(), port=free_port(), log=own / "voila.log"
    )
    try:
        server.start(own.name)
        yield server
    finally:
        server.stop()


# --- the browser ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium executable; skips (fails under CI) when it or playwright is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        unavailable("playwright is not installed: pip install -e '.[browser]' (or make test)")
    path, why = find_chromium()
    if path is None:
        unavailable(why)
    assert path is not None
    return path


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Browser]:
    """Headless chromium for this module (module scope: playwright's event loop never outlives
    the browser tests, so later tests that run their own asyncio loops are unaffected)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class ConsoleLog:
    """What the page logged: every message, and the errors that fail the test."""

    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def on_console(self, msg: ConsoleMessage) -> None:
        location = msg.location.get("url", "") if msg.location else ""
        line = f"[{msg.type}] {msg.text} ({location})"
        self.messages.append(line)
        if msg.type != "error":
            return
        if harmless(msg.text, location):
            self.ignored.append(line)
        else:
            self.errors.append(line)

    def on_page_error(self, error: Error) -> None:
        self.errors.append(f"[uncaught] {error.name}: {error.message}\n{error.stack}")


def harmless(text: str, location: str) -> bool:
    """A resource that failed to load from another host: offline, Voila's font CDN cannot load
    (the page blocks every other host anyway); that is never wfkit's code, which works offline."""
    host = urlsplit(location).hostname or ""
    return text.startswith("Failed to load resource") and host not in ("127.0.0.1", "localhost")


@pytest.fixture
def console() -> ConsoleLog:
    return ConsoleLog()


@pytest.fixture
def page(browser: Browser, console: ConsoleLog) -> Iterator[Page]:
    """A fresh page (own context) that may only talk to 127.0.0.1; fails the test on errors the
    page logged."""
    yield from checked_page(browser, console, VIEWPORT, timeout_ms=15_000, local_only=True)


def checked_page(
    browser: Browser,
    console: ConsoleLog,
    viewport: dict[str, int],
    *,
    timeout_ms: int,
    local_only: bool,
) -> Iterator[Page]:
    """The body of a page fixture: a fresh page in its own context, logging to ``console``;
    after the test, fail it on errors the page logged."""
    context = browser.new_context(viewport=viewport, device_scale_factor=1)
    context.set_default_timeout(timeout_ms)

    def only_local(route: Any) -> None:
        if urlsplit(route.request.url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            route.abort()

    if local_only:
        context.route("**/*", only_local)
    tab = context.new_page()
    tab.on("console", console.on_console)
    tab.on("pageerror", console.on_page_error)
    yield tab
    errors = list(console.errors)  # what closing the page logs (sockets going away) is not a bug
    try:
        tab.close(run_before_unload=False)
    finally:
        context.close()
    if errors:
        pytest.fail("the page logged errors:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture
def screenshot(tmp_path: Path) -> Callable[[Any, str], Path]:
    """``screenshot(page_or_locator, "editor.png")`` takes a picture of the page.

    With ``WFKIT_SCREENSHOTS=1`` it lands in docs/images/ (to refresh the README's pictures);
    otherwise under the test's tmp_path, so a test run leaves the work tree as it was.
    """

    def save(target: Any, name: str) -> Path:
        folder = IMAGES if os.environ.get("WFKIT_SCREENSHOTS") else tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        target.screenshot(path=str(path), animations="disabled")
        return path

    return save


# --- JupyterLab -------------------------------------------------------------------------------


def serving_lab(home: Path) -> Iterator[LabServer]:
    """A fresh Jupyter server (tests/browser/jupyterlab.py) on a free port, with ``home`` as its
    home, until the generator is closed (the body of a Lab fixture: ``yield from``)."""
    if importlib.util.find_spec("jupyterlab") is None:
        unavailable("jupyterlab is not installed: pip install -e '.[browser]' (or make test)")
    server = LabServer(home=home, port=free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[LabServer]:
    """One fresh JupyterLab for the session, serving copies of notebooks/ and running kernels
    of this venv that import the wfkit checked out here."""
    yield from serving_lab(tmp_path_factory.mktemp("lab"))
