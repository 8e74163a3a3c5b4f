"""The operator commands on a DuckDB file that no server holds: they open the file directly."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import wfkit as wf
from tests.api import http_flows
from wfkit.api.server import _write_private, running_server, sidecar_path
from wfkit.cli import app


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400", "NO_COLOR": "1"})


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.duckdb"
    with wf.Engine(path) as engine:
        engine.register(http_flows.flow)
    return path


def _start(db: Path, order: str) -> str:
    with wf.Engine(db) as engine:
        run = engine.start("http-order", {"order_id": order})
        engine.run_until_idle()
        assert run.status == wf.RunStatus.WAITING
        return run.id


def _advance(db: Path, run_id: str) -> tuple[str, list[str], list[wf.Event]]:
    """Run what the command left ready; the run's status, open waits and history."""
    with wf.Engine(db) as engine:
        engine.run_until_idle()
        run = engine.run(run_id)
        waits = [w.node_id for w in engine.waiting() if w.run_id == run_id]
        return run.status.value, waits, run.history()


def test_signal_and_approve_open_the_file_when_no_server_holds_it(db: Path) -> None:
    run_id = _start(db, "o-1")

    sent = invoke("signal", "paid", "o-1", "--payload", '{"amount": 3}', "--db", str(db))
    assert sent.exit_code == 0, sent.output
    assert sent.stdout == "signal 'paid' (key o-1) delivered: the waiting run resumed\n"
    assert _advance(db, run_id)[:2] == ("waiting", ["review"])

    again = invoke("signal", "paid", "o-1", "--payload", '{"amount": 3}', "--db", str(db))
    assert again.exit_code == 0
    assert "not delivered: no run waits for it" in again.stdout

    approved = invoke(
        "approve", run_id, "review", "--actor", "ana", "--comment", "ok", "--db", str(db)
    )
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.startswith(f"run {run_id}: 'review' approved by ana; the run is ")
    status, waits, history = _advance(db, run_id)
    assert (status, waits) == ("completed", [])
    decision = next(e for e in history if e.kind == "approval.approved")
    assert decision.actor == "ana"


def test_a_kept_signal_waits_for_its_run(db: Path) -> None:
    kept = invoke(
        "signal",
        "paid",
        "o-2",
        "--payload",
        '{"amount": 2}',
        "--post-if-absent",
        "--expires",
        "1h",
        "--db",
        str(db),
    )
    assert kept.exit_code == 0, kept.output
    assert kept.stdout == "signal 'paid' (key o-2) kept for the next matching wait for 1h\n"
    with wf.Engine(db) as engine:
        run = engine.start("http-order", {"order_id": "o-2"})
        engine.run_until_idle()
        assert [w.node_id for w in engine.waiting() if w.run_id == run.id] == ["review"]
        assert run.data.paid == 2.0


DEEP = "nested deeper than 64 levels"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("signal", "paid", "o-3", "--payload", "{oops"), "the payload is not JSON"),
        (("signal", "paid", "o-3", "--payload", "[1]"), "must be a JSON object"),
        (("signal", "paid", "o-3", "--payload", '{"amount": -1}'), "left in place"),
        *(
            (("signal", "paid", "o-3", "--payload", '{"a":' * n + "1" + "}" * n), DEEP)
            for n in (65, 1_000, 100_000)
        ),
        (("signal", "paid", "o-3", "--payload", "[" * 100_000 + "]" * 100_000), DEEP),
        (("approve", "nosuchrun", "review"), "no open approval"),
        (("cancel", "nosuchrun"), "there is no run 'nosuchrun'"),
        (("recover", "RUN", "--action", "forget"), "--action must be retry, skip or abandon"),
        (("recover", "RUN"), "has no failed compensation"),
        (("retry", "RUN"), "is waiting, not failed"),
        (("retry", "nosuchrun"), "there is no run 'nosuchrun'"),
    ],
)
def test_failures_are_one_line_and_exit_1(db: Path, args: tuple[str, ...], message: str) -> None:
    run_id = _start(db, "o-3")
    result = invoke(*[run_id if a == "RUN" else a for a in args], "--db", str(db))
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert _advance(db, run_id)[:2] == ("waiting", ["paid"])  # nothing changed


def test_cancel_records_the_actor_and_says_a_second_time_that_the_run_had_ended(
    db: Path,
) -> None:
    run_id = _start(db, "o-4")
    first = invoke("cancel", run_id, "--actor", "op", "--reason", "duplicate", "--db", str(db))
    assert first.exit_code == 0, first.output
    assert first.stdout == (
        f"run {run_id}: cancelled by op (1 pending step(s) cancelled); the run is cancelled\n"
    )
    second = invoke("cancel", run_id, "--db", str(db))
    assert second.exit_code == 0, second.output
    assert second.stdout == f"run {run_id} had already ended (cancelled); nothing to cancel\n"


def test_deactivate_and_activate_a_version_on_the_file(db: Path) -> None:
    in_flight = _start(db, "o-6")

    off = invoke("deactivate", "http-order", "1", "--db", str(db))
    assert off.exit_code == 0, off.output
    assert off.stdout == (
        "workflow 'http-order' v1 takes no new runs (its runs in flight finish); "
        "active versions: none\n"
    )
    with wf.Engine(db) as engine:
        with pytest.raises(wf.AdmissionError, match="deactivated"):
            engine.start("http-order", {"order_id": "o-7"})
        assert engine.run(in_flight).status == wf.RunStatus.WAITING
    on = invoke("activate", "http-order", "1", "--db", str(db))
    assert on.exit_code == 0, on.output
    assert on.stdout == "workflow 'http-order' v1 takes new runs again; active versions: v1\n"
    unknown = invoke("deactivate", "http-order", "7", "--db", str(db))
    assert unknown.exit_code == 1
    assert "has no version 7 (versions: 1)" in unknown.stderr
    assert _start(db, "o-8")


def test_retry_takes_a_failed_run_up_from_where_it_failed(db: Path) -> None:
    run_id = _start(db, "o-5")
    with wf.Engine(db) as engine:
        engine.signal("paid", "o-5", {"amount": 4})
        engine.run_until_idle()
        engine.approve(run_id, "review", approved=False, actor="ana", comment="no")
        engine.run_until_idle()
        assert engine.run(run_id).status == wf.RunStatus.FAILED

    retried = invoke("retry", run_id, "--actor", "op", "--db", str(db))
    assert retried.exit_code == 0, retried.output
    assert retried.stdout == f"run {run_id}: retried by op; the run is waiting\n"
    status, waits, history = _advance(db, run_id)
    assert (status, waits) == ("waiting", ["review"])  # the rejected approval is asked again
    assert [(e.actor, e.detail["run_attempt"]) for e in history if e.kind == "run.retried"] == [
        ("op", 2)
    ]
    assert [e.kind for e in history].count("signal.received") == 1


def test_a_missing_file_is_an_error_not_a_new_database(tmp_path: Path) -> None:
    missing = tmp_path / "nope.duckdb"
    result = invoke("cancel", "r-1", "--db", str(missing))
    assert result.exit_code == 1
    assert "no such file" in result.stderr
    assert not missing.exists()


def test_a_stale_sidecar_of_a_dead_server_is_ignored(db: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    info = {"url": "http://127.0.0.1:9", "pid": int(gone.stdout), "token": "t" * 20}
    _write_private(sidecar_path(db), {**info, "db": str(db.resolve()), "server_id": "0" * 32})
    assert running_server(db) is None
    run_id = _start(db, "o-5")
    result = invoke("cancel", run_id, "--db", str(db))
    assert result.exit_code == 0, result.output
    assert "via the server" not in result.stdout
    assert result.stderr == ""  # a server killed with SIGKILL leaves its file: nothing to say


# --- the server file -----------------------------------------------------------------------------


@pytest.mark.parametrize("planted", ["file", "link"])
def test_the_server_file_is_never_written_through_a_file_someone_made_first(
    tmp_path: Path, planted: str
) -> None:
    """In a shared folder another user may create the file a server is about to write: a file
    they can read (and keep open), or a link to one. The token must reach neither."""
    target = sidecar_path(tmp_path / "runs.duckdb")
    guessed = tmp_path / f".{target.name}.{os.getpid()}.tmp"  # the name a server used to write
    theirs = guessed if planted == "file" else tmp_path / "theirs.txt"
    theirs.write_text("")
    theirs.chmod(0o666)
    if planted == "link":
        guessed.symlink_to(theirs)
    previous = os.umask(0)  # the permissions must not depend on the umask either
    try:
        with theirs.open(encoding="utf-8") as spy:
            _write_private(target, {"url": "http://127.0.0.1:1", "pid": 1, "token": "s3cret"})
            assert spy.read() == ""
    finally:
        os.umask(previous)
    assert theirs.read_text() == ""
    assert not target.is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text())["token"] == "s3cret"
    left = {p.name for p in tmp_path.iterdir()} - {target.name, guessed.name, theirs.name}
    assert not left, f"temporary files left behind: {left}"


class _NotWfkit(http.server.BaseHTTPRequestHandler):
    """Some other program's web server, on the port a dead wfkit server used."""

    def do_GET(self) -> None:
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("there", ["nothing", "another web server"])
def test_a_server_file_naming_a_live_process_that_is_no_wfkit_server_is_named_and_ignored(
    db: Path, there: str
) -> None:
    """The user's own file names a live process (this test's own, as after pid reuse), but
    nothing answers at its URL, or something that is not wfkit does: the command says so and
    uses the file, which no one holds."""
    run_id = _start(db, "o-6")
    with contextlib.ExitStack() as stack:
        if there == "nothing":
            with socket.socket() as probe:  # a port nobody listens on
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        else:
            other = http.server.HTTPServer(("127.0.0.1", 0), _NotWfkit)
            stack.callback(other.server_close)
            threading.Thread(target=other.serve_forever, daemon=True).start()
            stack.callback(other.shutdown)
            port = other.server_address[1]
        sidecar = sidecar_path(db)
        url = f"http://127.0.0.1:{port}"
        info = {"url": url, "pid": os.getpid(), "token": "t" * 20, "server_id": "0" * 32}
        _write_private(sidecar, {**info, "db": str(db.resolve())})

        result = invoke("cancel", run_id, "--db", str(db))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"run {run_id}: cancelled by ")
    said = "nothing answers at" if there == "nothing" else "is not a wfkit server"
    assert result.stderr.startswith(
        f"warning: ignored {sidecar}: it names process {os.getpid()} at {url}, but "
    )
    assert said in result.stderr and result.stderr.count("\n") == 1
    assert _advance(db, run_id)[0] == "cancelled"


def test_approve_item_decides_one_item_of_a_for_each(tmp_path: Path) -> None:
    registry = wf.ActivityRegistry()
    registry.register("prepare", lambda ctx: None)
    registry.register("publish", lambda ctx: None)
    flow = (
        wf.Workflow("batch")
        .start_with("prepare")
        .for_each("items", lambda b: b.approval("review").then("publish"))
    )
    db = tmp_path / "runs.duckdb"
    with wf.Engine(db, registry=registry) as engine:
        engine.register(flow)
        run = engine.start("batch", {"items": ["a", "b"]})
        engine.run_until_idle()

    approved = invoke("approve", run.id, "review", "--item", "1", "--actor", "ana", "--db", str(db))
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.startswith(f"run {run.id}: 'review' (item 1) approved by ana")
    with wf.Engine(db, registry=registry) as engine:
        assert [w.loop_path for w in engine.waiting()] == [(0,)]

    for bad in ("x", "-1", "", "1,,2", "true", "1.0", "+1", "1_0", "\u0661", "0x1", "9" * 5000):
        refused = invoke("approve", run.id, "review", "--item", bad, "--db", str(db))
        assert refused.exit_code == 2, refused.output
        assert "is not an item" in refused.output
    gone = invoke("approve", run.id, "review", "--item", "1", "--actor", "ana", "--db", str(db))
    assert gone.exit_code != 0 and "open for items: [0]" in " ".join(gone.output.split())
