"""Random artifact references — protocols, paths, sizes, hashes, formats — against an artifact
root laid with traps: files of issued artifacts swapped for links to a secret outside the root
(with the same size and hash, so a followed link would load), for FIFOs, folders and
``/dev/zero``, and a run folder that is a link out of the root; listening sockets for the
network protocols. Every load, through ``engine.load_artifact``, ``run.load`` or the records a
job carries to another process, either returns the value of an artifact the engine issued and
left untouched or raises ``ArtifactError``/``UsageError``, within seconds; nothing connects to
the sockets, nothing outside the root is opened by name, no secret byte comes back, and no
message tells the secret's size or hash."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import wfkit as wf
from tests.engine.helpers import run_to_idle
from tests.engine.opens import watching
from wfkit.engine.artifacts import ARTIFACT_KEY

SECRET = b"TOP-SECRET " * 7 + b"\n"
LIMIT = 5.0  # seconds a load may take


@dataclass
class World:
    """An engine, the references it issued, and the traps around them."""

    engine: wf.Engine
    run: wf.Run
    good: dict[str, Any]  # uri -> the value its reference loads
    refs: list[dict[str, Any]]  # every reference the engine issued (good and swapped)
    paths: list[str]  # paths worth pointing a reference at
    ports: list[int]
    sockets: list[socket.socket] = field(default_factory=list)
    secret: str = ""

    def __repr__(self) -> str:
        return f"World({self.engine.artifacts})"

    def connected(self) -> bool:
        """True when anything connected to one of the listening sockets."""
        for server in self.sockets:
            try:
                conn, _ = server.accept()
            except BlockingIOError:
                continue
            conn.close()
            return True
        return False


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("fuzz")
    root = base / "store"
    outside = base / "outside"
    outside.mkdir()
    secret = outside / f"secret-{uuid.uuid4().hex[:8]}.txt"
    secret.write_bytes(SECRET)
    os.mkfifo(outside / "fifo")
    copy = base / "model.bin"
    copy.write_bytes(b"weights" * 50)

    registry = wf.ActivityRegistry()
    registry.register(
        "make",
        lambda ctx: {
            "b": wf.Artifact(b"bytes content"),
            "t": wf.Artifact("text content", name="t"),
            "f": wf.Artifact(copy),
        },
    )
    registry.register("victims", lambda ctx: [wf.Artifact(SECRET, name=f"v{i}") for i in range(5)])
    engine = wf.Engine(base / "runs.duckdb", artifacts=root, registry=registry)
    run = run_to_idle(engine, wf.Workflow("good").start_with("make"))
    victim = run_to_idle(engine, wf.Workflow("victim").start_with("victims"))
    good_refs = list(run.outputs["make"].values())
    victim_refs = list(victim.outputs["victims"])
    good = {
        good_refs[0][ARTIFACT_KEY]: b"bytes content",
        good_refs[1][ARTIFACT_KEY]: "text content",
        good_refs[2][ARTIFACT_KEY]: b"weights" * 50,
    }
    # the victim's files swapped for traps: a link to the secret (same size and hash), a FIFO,
    # a link to /dev/zero, a folder, a link to a FIFO outside the root
    stored = [Path(r[ARTIFACT_KEY].removeprefix("file://")) for r in victim_refs]
    for path in stored:
        path.unlink()
    stored[0].symlink_to(secret)
    os.mkfifo(stored[1])
    stored[2].symlink_to("/dev/zero")
    stored[3].mkdir()
    stored[4].symlink_to(outside / "fifo")
    (root / "ffffffffffffffff").symlink_to(outside, target_is_directory=True)
    servers = []
    for _ in range(2):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        servers.append(server)
    ports = [s.getsockname()[1] for s in servers]
    paths = [
        str(secret),
        str(outside / "fifo"),
        "/dev/zero",
        "/etc/passwd",
        "/",
        "",
        str(root),
        f"{root}/..",
        f"{root}/ffffffffffffffff/{secret.name}",
        f"{root}/ffffffffffffffff/x/{secret.name}",
        f"{root}/{run.id}/../../outside/{secret.name}",
        f"{root}/{victim.id}",
        f"{root}/%2e%2e/outside/{secret.name}",
        *[str(p) for p in stored],
        *[r[ARTIFACT_KEY].removeprefix("file://") for r in good_refs],
    ]
    yield World(
        engine,
        run,
        good,
        good_refs + victim_refs,
        paths,
        ports,
        servers,
        secret.name,
    )
    for server in servers:
        server.close()
    engine.close()


PROTOCOLS = [
    "file://",
    "file:",
    "FILE://",
    "local://",
    "file://localhost",
    "ｆｉｌｅ://",
    "memory://",
    "memory:///",
    "s3://bucket",
    "simplecache::file://",
    "a::b::file://",
    "ftp://127.0.0.1:{0}",
    "http://127.0.0.1:{1}",
    "https://127.0.0.1:{1}",
    "",
]
ODD = st.sampled_from(
    ["NaN", "inf", "1e9", None, True, False, 1.5, float("nan"), [], {}, "0", -1, 2**70]
)


def _mutate(uri: str, where: int, what: str) -> str:
    at = where % (len(uri) + 1)
    return uri[:at] + what + uri[at:]


@st.composite
def references(draw: st.DrawFn, world: World) -> Any:
    """A reference the engine issued, its URI, its other fields, both or neither changed at
    random (those left as issued reach the files and their traps)."""
    base = draw(st.sampled_from(world.refs))
    change = draw(st.sampled_from(["nothing", "uri", "fields", "both"]))
    uri = base[ARTIFACT_KEY]
    if change in ("uri", "both"):
        uri = draw(
            st.one_of(
                st.builds(
                    _mutate,
                    st.just(uri),
                    st.integers(0, 400),
                    st.sampled_from(["/..", "/../..", "/", "//", "::", "\x00", "?x", "#y", "é"]),
                ),
                st.builds(
                    lambda proto, path: proto.format(*world.ports) + path,
                    st.sampled_from(PROTOCOLS),
                    st.sampled_from(world.paths),
                ),
                st.text(max_size=300),
                ODD,
            )
        )
    ref = {ARTIFACT_KEY: uri, **{k: v for k, v in base.items() if k != ARTIFACT_KEY}}
    if change in ("fields", "both"):
        _change_fields(draw, ref)
    if draw(st.integers(0, 9)) == 9:
        del ref[draw(st.sampled_from(list(ref)))]
    if draw(st.integers(0, 19)) == 19:
        return draw(st.one_of(ODD, st.text(max_size=30)))
    return ref


def _change_fields(draw: st.DrawFn, ref: dict[str, Any]) -> None:
    if draw(st.booleans()):
        ref["size"] = draw(st.one_of(st.integers(-(2**70), 2**70), ODD))
    if draw(st.booleans()):
        ref["sha256"] = draw(
            st.one_of(
                st.just(hashlib.sha256(SECRET).hexdigest()),
                st.text("0123456789abcdef", min_size=64, max_size=64),
                st.text(max_size=80),
                ODD,
            )
        )
    if draw(st.booleans()):
        ref["format"] = draw(
            st.one_of(
                st.sampled_from(["bytes", "text", "file", "numpy", "pandas", "pickle", ""]),
                st.text(max_size=20),
                ODD,
            )
        )
    if draw(st.booleans()):
        ref[draw(st.sampled_from(["media_type", "name"]))] = draw(
            st.one_of(st.text(max_size=20), ODD)
        )


def _load(world: World, how: str, ref: Any) -> Any:
    engine = world.engine
    if how == "engine":
        return engine.load_artifact(ref)
    if how == "run":
        return world.run.load(ref)
    # as on a Dask worker: only the records the job carried
    from wfkit.engine.artifact_records import CarriedRecords
    from wfkit.engine.artifacts import load_artifact

    records = engine.runtime.artifact_records
    carried = records.carry([json.dumps(ref, default=str)], (), world.run.id)
    return load_artifact(ref, engine.artifacts, carried or CarriedRecords(), world.run.id)


def _attempt(world: World, how: str, ref: Any) -> tuple[bool, Any]:
    """(finished, what the load returned or raised), the load on a thread of its own."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = _load(world, how, ref)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    if thread.is_alive():
        return False, None
    return True, box.get("error", box.get("value"))


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_reference_never_reads_outside_the_root_never_connects_and_never_hangs(
    world: World, data: st.DataObject
) -> None:
    ref = data.draw(references(world), label="ref")
    how = data.draw(st.sampled_from(["engine", "run", "carried"]), label="how")
    with watching() as seen:
        finished, outcome = _attempt(world, how, ref)
    assert finished, f"loading {ref!r} did not finish within {LIMIT}s"
    assert not world.connected(), f"loading {ref!r} opened a network connection"
    assert seen.connected == []
    outside = [p for p in seen.opened if world.secret in p or p in ("/dev/zero", "/etc/passwd")]
    assert not outside, f"loading {ref!r} opened {outside}"
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, wf.ArtifactError | wf.UsageError), repr(outcome)
        message = str(outcome)
        assert "TOP-SECRET" not in message
        digest = hashlib.sha256(SECRET).hexdigest()[:12]
        assert digest not in message or digest in str(ref)  # (a victim's file name holds it)
        assert "corrupted" not in message and " bytes with SHA-256" not in message
        return
    # loaded: only an artifact the engine issued and nobody touched, exactly as recorded
    assert isinstance(ref, dict) and ref in world.refs, ref
    expected = world.good[ref[ARTIFACT_KEY]]
    if isinstance(outcome, Path):
        assert outcome.read_bytes() == expected
    else:
        assert outcome == expected
