"""``<db>.server.json`` is trusted only when it is a regular file of the user's own, mode 0600, for
this database, and the server at its address answers ``/health`` with the file's server id
(wfkit/api/discovery.py; README, "Security").

A file planted in a shared folder once received ``wfkit signal``'s token and payload (the
command printed "delivered" while the real run still waited) and made ``wfkit runs purge``
refuse. Each hostile file here names a spy that answers like a wfkit server and records every
request: the token and the payload must never reach it, and the command must use the DuckDB
file itself, saying which file it ignored and why.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.api import http_flows
from tests.api.serving import WFKIT, Spy, plant, serving, spy_server
from tests.api.test_operate import _advance, _start, invoke
from tests.polling import wait_until
from wfkit.api.server import _write_private, running_server, sidecar_path

TOKEN = "planted-" + uuid.uuid4().hex
PAYLOAD = '{"amount": 3, "note": "card 4111-1111"}'
FLOWS = Path(http_flows.__file__)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    import wfkit as wf

    path = tmp_path / "runs.duckdb"
    with wf.Engine(path) as engine:
        engine.register(http_flows.flow)
    return path


@pytest.fixture
def spy() -> Iterator[Spy]:
    with spy_server("planted-" + uuid.uuid4().hex) as running:
        yield running


def _fields(path: Path, spy: Spy, **changes: object) -> dict[str, object]:
    """What a planted file says: the spy's address and id, a live process, this database."""
    found: dict[str, object] = {
        "url": spy.url,
        "pid": os.getpid(),
        "token": TOKEN,
        "db": str(path.resolve()),
        "server_id": spy.server_id,
    }
    return {**found, **changes}


def _symlink(db: Path, spy: Spy) -> str:
    elsewhere = plant(db.parent / "elsewhere.json", **_fields(db, spy))
    sidecar_path(db).symlink_to(elsewhere)
    return "it is a symbolic link"


def _readable(db: Path, spy: Spy) -> str:
    plant(sidecar_path(db), 0o644, **_fields(db, spy))
    return "other users may read or change it (mode 0644; a wfkit server writes it with mode 0600)"


def _writable_by_group(db: Path, spy: Spy) -> str:
    plant(sidecar_path(db), 0o620, **_fields(db, spy))
    return "other users may read or change it (mode 0620"


def _someone_elses(db: Path, spy: Spy) -> str:
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(plant(sidecar_path(db), **_fields(db, spy)), 65534, 65534)
    return "it is owned by uid 65534, not by you (uid 0)"


def _fifo(db: Path, spy: Spy) -> str:
    os.mkfifo(sidecar_path(db), 0o600)  # reading it would wait for a writer for ever
    return "it is not a regular file"


def _another_database(db: Path, spy: Spy) -> str:
    plant(sidecar_path(db), **_fields(db, spy, db="/srv/other/runs.duckdb"))
    return f"it is the server file of /srv/other/runs.duckdb, not of {db.resolve()}"


def _no_server_id(db: Path, spy: Spy) -> str:
    fields = _fields(db, spy)
    del fields["server_id"]
    plant(sidecar_path(db), **fields)
    return "it names no server id"


def _another_server(db: Path, spy: Spy) -> str:
    """The user's own file, but the server at its address is not the one that wrote it (the
    server died and something else took its port; the process id was reused)."""
    plant(sidecar_path(db), **_fields(db, spy, server_id=uuid.uuid4().hex))
    return f"the server at {spy.url} is not the one that wrote it"


PLANTED: dict[str, Callable[[Path, Spy], str]] = {
    "a symbolic link": _symlink,
    "mode 0644": _readable,
    "mode 0620": _writable_by_group,
    "another user's file": _someone_elses,
    "a FIFO": _fifo,
    "another database's file": _another_database,
    "a file without a server id": _no_server_id,
    "another server at its address": _another_server,
}


def _health_only(spy: Spy) -> bool:
    """The spy was at most asked for /health, without the token."""
    return all(
        (r.method, r.path) == ("GET", "/api/v1/health") and "authorization" not in r.headers
        for r in spy.requests
    )


@pytest.mark.timeout(60)  # a FIFO read the old way never returns
@pytest.mark.parametrize("planted", list(PLANTED))
def test_a_planted_server_file_gets_nothing_and_the_signal_reaches_the_run(
    db: Path, spy: Spy, planted: str
) -> None:
    run_id = _start(db, "o-1")
    reason = PLANTED[planted](db, spy)

    sent = invoke("signal", "paid", "o-1", "--payload", PAYLOAD, "--db", str(db))
    assert sent.exit_code == 0, sent.output
    assert sent.stdout == "signal 'paid' (key o-1) delivered: the waiting run resumed\n"
    assert sent.stderr.startswith(f"warning: ignored {sidecar_path(db)}: {reason}")
    assert sent.stderr.count("\n") == 1
    assert not spy.saw(TOKEN) and not spy.saw("4111")
    assert _health_only(spy)
    if planted != "another server at its address":  # only a file of the user's own is followed
        assert spy.requests == []
    assert _advance(db, run_id)[:2] == ("waiting", ["review"])  # the real run took it


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "it is not a regular file"),  # a folder
        (b" " * 70_000, "it is larger than any server file (over 64 KiB)"),
        (b"\xff\xfe{}", "it is not a server file wfkit wrote (it is not UTF-8 text)"),
        (b"{oops", "it is not a server file wfkit wrote (it is not JSON)"),
        (b"[]", "it is not a server file wfkit wrote (it is not a JSON object)"),
        ({"pid": True}, "its pid is not a process id"),
        ({"pid": -1}, "its pid is not a process id"),
        ({"url": "file:///etc/passwd"}, "its url is not an http:// URL"),
        ({"token": None}, "it lacks the token or the db"),
        ({"db": "runs.duckdb"}, "it is the server file of runs.duckdb, not of /"),
    ],
)
def test_a_malformed_server_file_of_ones_own_is_refused_saying_what_is_wrong(
    db: Path, spy: Spy, content: bytes | dict[str, object] | None, said: str
) -> None:
    from wfkit.api.discovery import discover

    sidecar = sidecar_path(db)
    if content is None:
        sidecar.mkdir()
    elif isinstance(content, dict):
        plant(sidecar, **_fields(db, spy, **content))
    else:
        sidecar.write_bytes(content)
        sidecar.chmod(0o600)
    found = discover(db)
    assert found.server is None
    assert found.warning is not None and found.warning.startswith(f"ignored {sidecar}: it ")
    assert said in found.warning
    assert spy.requests == []


def test_purge_and_archive_are_not_stopped_by_a_planted_server_file(
    db: Path, spy: Spy, tmp_path: Path
) -> None:
    from tests.test_cli import old_runs, stored

    runs = old_runs(db)
    plant(sidecar_path(db), 0o644, **_fields(db, spy))
    archive = ("runs", "archive", str(tmp_path / "a"), "--older-than", "30d", "--status", "failed")
    archived = invoke(*archive, "--db", str(db))
    assert archived.exit_code == 0, archived.output
    assert archived.stderr.startswith(f"warning: ignored {sidecar_path(db)}: other users may")
    assert archived.stdout.splitlines()[-1].startswith("archived 1 run into ")
    purged = invoke("runs", "purge", "--older-than", "1d", "--db", str(db))
    assert purged.exit_code == 0, purged.output
    assert purged.stdout.startswith("purged 1 run that ended more than 1d ago")
    assert set(stored(db).values()) == {"waiting"} and runs["waiting"] in stored(db)
    assert spy.requests == []


def test_the_client_follows_no_redirect_so_the_token_goes_nowhere_else(spy: Spy) -> None:
    import wfkit as wf
    from wfkit.api.client import ApiClient, NoServer

    with spy_server("redirector", redirect=spy.url) as redirector:
        client = ApiClient(redirector.url, TOKEN)
        with pytest.raises(wf.WfkitError, match="HTTP 302"):
            client.signal("paid", "o-1", {"amount": 3})
        with pytest.raises(NoServer, match="is not a wfkit server"):
            client.health()
    assert [r.method for r in redirector.requests] == ["POST", "GET"]
    assert spy.requests == []


# --- a real wfkit serve holds the file ----------------------------------------------------------


def _wfkit(*args: str) -> tuple[int, str, str]:
    import subprocess

    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    done = subprocess.run(
        [str(WFKIT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_the_real_server_is_found_and_a_planted_file_in_its_place_gets_nothing(
    db: Path, spy: Spy, tmp_path: Path
) -> None:
    import httpx

    sidecar = sidecar_path(db)
    with serving(str(db), tmp_path / "server.log", TOKEN, "--module", str(FLOWS)) as url:
        genuine = wait_until(
            lambda: sidecar.exists() and sidecar.read_bytes(), "the server file", timeout=30
        )
        info = json.loads(genuine)
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        health = httpx.get(f"{url}/api/v1/health", trust_env=False).json()
        assert health["server_id"] == info["server_id"] and len(info["server_id"]) == 32
        assert running_server(db) is not None

        auth = {"Authorization": f"Bearer {TOKEN}"}
        body = {"workflow": "http-order", "data": {"order_id": "o-9"}}
        with httpx.Client(base_url=f"{url}/api/v1", headers=auth, trust_env=False) as api:
            run_id = api.post("/runs", json=body).json()["run_id"]

            def waits_at(node: str) -> bool:
                waits = api.get("/waiting").json()["waits"]
                return any(w["run_id"] == run_id and w["node_id"] == node for w in waits)

            wait_until(lambda: waits_at("paid"), "the run to wait for its payment", timeout=30)
            for replace in (_another_server, _readable):
                reason = replace(db, spy)
                code, out, err = _wfkit(
                    "signal", "paid", "o-9", "--payload", PAYLOAD, "--db", str(db)
                )
                assert code == 1, out + err
                assert err.startswith(f"error: {db} is held by another process (")
                assert f"ignored {sidecar}: {reason}" in err
                assert "nothing was sent to" in err and err.count("\n") == 1
                code, out, err = _wfkit("runs", "purge", "--older-than", "1d", "--db", str(db))
                assert code == 1 and f"ignored {sidecar}: {reason}" in err, out + err
            assert not spy.saw(TOKEN) and not spy.saw("4111") and _health_only(spy)
            assert waits_at("paid")  # nothing reached the run

            _write_private(sidecar, info)  # the server's own file again: it is used
            code, out, err = _wfkit("signal", "paid", "o-9", "--payload", PAYLOAD, "--db", str(db))
            assert (code, err) == (0, ""), out + err
            assert out == (
                "signal 'paid' (key o-9) delivered: the waiting run resumed "
                f"(via the server at {url})\n"
            )
            wait_until(lambda: waits_at("review"), "the run to wait for its review", timeout=30)
    assert not sidecar.exists()  # the server removed its own file
