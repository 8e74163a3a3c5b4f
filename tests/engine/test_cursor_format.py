"""Runs written in the cursor's format 1 are taken up and finished.

Format 1 (wfkit before the cursor carried a version) kept a saga entry's state under ``st``, the
key tokens keep theirs under; format 2 keeps it under ``state`` and writes ``"v": 2`` into every
snapshot (wfkit/engine/cursor.py). The rows below are what that wfkit wrote for a run whose
engine process died: DuckDB file of a run of :func:`legacy_order` started with three lines,
parked on its signal (snapshot, seq 8: four saga entries in format 1), signalled, ``pack``
completed (the delta of seq 10 pushes a fifth entry in format 1), and the process died during
the attempt of ``pause``. Nothing below was written by this wfkit.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from wfkit.engine.cursor import FrameRef
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.state import RunState
from wfkit.store.base import Statement

RUN = "91e2e6ad7b9141c5"
INPUT = '{"order":"o-1","lines":["a","b","c"]}'
T0, T1 = datetime(2026, 1, 1, 0, 0), datetime(2026, 1, 1, 0, 1)

SNAPSHOT = (
    '{"status":"waiting","error":null,"counter":10,"tokens":{"t10":{"node":"go","st":"wait",'
    '"att":1,"fr":[],"li":null}},"frames":{},"items":{},"visits":{"start":1,"reserve":1,'
    '"for_each-1":1,"charge|f3:0":1,"charge|f3:1":1,"charge|f3:2":1,"go":1},"outputs":{'
    '"reserve":{"hold":"H1"},"charge":{"0":{"paid":"a"},"1":{"paid":"b"},"2":{"paid":"c"}}},'
    '"saga":{"s2":{"saga":"saga-1","node":"reserve","comp":"release","pos":1,"st":"done",'
    '"li":null,"out":{"hold":"H1"}},"s5":{"saga":"saga-1","node":"charge","comp":"refund",'
    '"pos":2,"st":"done","li":0,"out":{"paid":"a"},"fr":[["for_each-1","f3",0]],"lp":[0],'
    '"item":"a"},"s7":{"saga":"saga-1","node":"charge","comp":"refund","pos":3,"st":"done",'
    '"li":1,"out":{"paid":"b"},"fr":[["for_each-1","f3",1]],"lp":[1],"item":"b"},"s9":{'
    '"saga":"saga-1","node":"charge","comp":"refund","pos":4,"st":"done","li":2,"out":{'
    '"paid":"c"},"fr":[["for_each-1","f3",2]],"lp":[2],"item":"c"}},"unwinds":{},"ending":{},'
    '"caller":{},"retry":{}}'
)

DELTAS = {
    1: '{"s":{"counter":1,"visits:start":1,"tokens:t1":{"node":"reserve","st":"ready","att":1,'
    '"fr":[],"li":null},"visits:reserve":1,"status":"running","error":null},"d":[]}',
    2: '{"s":{"outputs:reserve":{"hold":"H1"},"counter":4,"saga:s2":{"saga":"saga-1","node":'
    '"reserve","comp":"release","pos":1,"st":"done","li":null,"out":{"hold":"H1"}},'
    '"visits:for_each-1":1,"frames:f3":{"fork":"for_each-1","join":"join-1","n":3,"done":0,'
    '"failed":[],"closed":false,"fr":[],"mode":"all","count":null,"next":1,"limit":1},'
    '"items:f3":["a","b","c"],"visits:charge|f3:0":1,"tokens:t4":{"node":"charge","st":"ready",'
    '"att":1,"fr":[["for_each-1","f3",0]],"li":0}},"d":["tokens:t1"]}',
    4: '{"s":{"outputs:charge":{"0":{"paid":"a"}},"counter":6,"saga:s5":{"saga":"saga-1",'
    '"node":"charge","comp":"refund","pos":2,"st":"done","li":0,"out":{"paid":"a"},"fr":[['
    '"for_each-1","f3",0]],"lp":[0],"item":"a"},"frames:f3":{"fork":"for_each-1","join":'
    '"join-1","n":3,"done":1,"failed":[],"closed":false,"fr":[],"mode":"all","count":null,'
    '"next":2,"limit":1},"visits:charge|f3:1":1,"tokens:t6":{"node":"charge","st":"ready",'
    '"att":1,"fr":[["for_each-1","f3",1]],"li":1}},"d":["tokens:t4"]}',
    5: '{"s":{"outputs:charge":{"0":{"paid":"a"},"1":{"paid":"b"}},"counter":8,"saga:s7":{'
    '"saga":"saga-1","node":"charge","comp":"refund","pos":3,"st":"done","li":1,"out":{'
    '"paid":"b"},"fr":[["for_each-1","f3",1]],"lp":[1],"item":"b"},"frames:f3":{"fork":'
    '"for_each-1","join":"join-1","n":3,"done":2,"failed":[],"closed":false,"fr":[],"mode":'
    '"all","count":null,"next":3,"limit":1},"visits:charge|f3:2":1,"tokens:t8":{"node":'
    '"charge","st":"ready","att":1,"fr":[["for_each-1","f3",2]],"li":2}},"d":["tokens:t6"]}',
    6: '{"s":{"outputs:charge":{"0":{"paid":"a"},"1":{"paid":"b"},"2":{"paid":"c"}},"counter":'
    '10,"saga:s9":{"saga":"saga-1","node":"charge","comp":"refund","pos":4,"st":"done","li":2,'
    '"out":{"paid":"c"},"fr":[["for_each-1","f3",2]],"lp":[2],"item":"c"},"visits:go":1,'
    '"tokens:t10":{"node":"go","st":"wait","att":1,"fr":[],"li":null},"status":"waiting",'
    '"error":null},"d":["frames:f3","items:f3","tokens:t8"]}',
    9: '{"s":{"tokens:t10":{"node":"pack","st":"ready","att":1,"fr":[],"li":null},'
    '"visits:pack":1,"status":"running","error":null},"d":[]}',
    10: '{"s":{"outputs:pack":{"parcel":"P1"},"counter":11,"saga:s11":{"saga":"saga-1","node":'
    '"pack","comp":"unpack","pos":5,"st":"done","li":null,"out":{"parcel":"P1"}},'
    '"visits:pause":1,"tokens:t10":{"node":"pause","st":"ready","att":1,"fr":[],"li":null}},'
    '"d":[]}',
}

# seq, time, kind, node, token, attempt, started_at, output, detail (no actor, error or patch)
EVENTS: list[tuple[Any, ...]] = [
    (1, T0, "run.started", None, None, None, None, None, '{"workflow":"legacy-order","version":1}'),
    (2, T0, "step.completed", "reserve", "t1", 1, T0, '{"hold":"H1"}', None),
    (3, T0, "for_each.started", "for_each-1", "t1", None, None, None, '{"items":3,"limit":1}'),
    (
        4,
        T0,
        "step.completed",
        "charge",
        "t4",
        1,
        T0,
        '{"paid":"a"}',
        '{"loop_index":0,"loop_path":[0]}',
    ),
    (
        5,
        T0,
        "step.completed",
        "charge",
        "t6",
        1,
        T0,
        '{"paid":"b"}',
        '{"loop_index":1,"loop_path":[1]}',
    ),
    (
        6,
        T0,
        "step.completed",
        "charge",
        "t8",
        1,
        T0,
        '{"paid":"c"}',
        '{"loop_index":2,"loop_path":[2]}',
    ),
    (
        7,
        T0,
        "join.completed",
        "join-1",
        None,
        None,
        None,
        None,
        '{"completed":3,"failed":0,"expected":3}',
    ),
    (8, T0, "signal.waiting", "go", "t10", None, None, None, '{"name":"go","key":"o-1"}'),
    (9, T1, "signal.received", "go", "t10", None, None, None, None),
    (10, T1, "step.completed", "pack", "t10", 1, T1, '{"parcel":"P1"}', None),
]

# node, token, compensation, position (saga "saga-1", status "done")
SAGA_STEPS = [
    ("reserve", "t1", "release", 1, T0),
    ("charge", "t4", "refund", 2, T0),
    ("charge", "t6", "refund", 3, T0),
    ("charge", "t8", "refund", 4, T0),
    ("pack", "t10", "unpack", 5, T1),
]


def legacy_order() -> wf.Workflow:
    """The workflow of the run: a saga around a reservation, a for_each of charges, a wait,
    a packing step, and a shipping step that fails (its run unwinds the saga)."""
    return (
        wf.Workflow("legacy-order")
        .start_with()
        .saga(
            lambda s: (
                s.then("reserve")
                .compensate_with("release")
                .for_each(
                    "lines",
                    lambda b: b.then("charge").compensate_with("refund"),
                    max_parallelism=1,
                )
                .wait_for_signal("go", correlate="order")
                .then("pack")
                .compensate_with("unpack")
                .then("pause")
                .then("ship", max_attempts=1)
            )
        )
    )


def write_rows(engine: wf.Engine, status: str) -> None:
    """The run's rows as the older wfkit left them (``status``: its summary row's status)."""
    digest = legacy_order().content_hash
    instance = (RUN, "legacy-order", 1, digest, status, INPUT, INPUT, SNAPSHOT, 8, None)
    events = [
        (
            RUN,
            seq,
            at,
            kind,
            node,
            token,
            attempt,
            started,
            None,
            None,
            out,
            None,
            DELTAS.get(seq),
            d,
        )
        for seq, at, kind, node, token, attempt, started, out, d in EVENTS
    ]
    steps = [(RUN, "saga-1", n, t, c, pos, "done", at) for n, t, c, pos, at in SAGA_STEPS]
    engine.runtime.store.write(
        [
            Statement("copy_wf_instances", [(*instance, T0, T1, None, None, None, None)]),
            Statement("copy_wf_events", events),
            Statement("copy_wf_saga_steps", steps),
        ]
    )


def test_a_run_written_in_format_1_is_taken_up_and_unwinds_to_its_end(
    open_engine, acts, clock, db_path
) -> None:
    outputs: list[tuple[str, Any]] = []
    acts.noop("reserve", "charge", "pack", "pause")
    for undo in ("release", "refund", "unpack"):
        acts.add(undo, lambda ctx: outputs.append((ctx.node_id, ctx.outputs[ctx.node_id])))

    def ship(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("carrier down")

    acts.add("ship", ship)
    first = open_engine()
    first.register(legacy_order())
    # DuckDB's engine left the summary row as the snapshot said (a run woken by a signal is
    # written once it parks or ends); PostgreSQL's marks a woken run running at once
    write_rows(first, "waiting" if isinstance(db_path, Path) else "running")
    first.close()
    clock.advance("2m")

    engine = open_engine()
    run = engine.run(RUN)
    assert {t: (v.node_id, v.state) for t, v in run.tokens_at(10).items()} == {
        "t10": ("pause", wf.TokenState.READY)
    }
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert "carrier down" in (run.view().error or "")
    # steps done before the crash are not run again; the step in flight is (at least once)
    assert acts.names()[:2] == ["pause", "ship"]
    assert [(c.name, c.item) for c in acts.calls[2:]] == [
        ("unpack", None),
        ("refund", "c"),
        ("refund", "b"),
        ("refund", "a"),
        ("release", None),
    ]
    # each compensation saw the output its format-1 entry kept of its own visit
    assert outputs == [
        ("pack", {"parcel": "P1"}),
        ("charge", {"paid": "c"}),
        ("charge", {"paid": "b"}),
        ("charge", {"paid": "a"}),
        ("reserve", {"hold": "H1"}),
    ]
    state = json.loads(engine.runtime.store.query("run_row", [RUN])[0][7])
    assert state["v"] == 2
    assert {e["state"] for e in state["saga"].values()} == {"compensated"}
    assert not any("st" in e for e in state["saga"].values())


def test_a_snapshot_of_a_newer_format_is_refused_saying_so() -> None:
    flow = CompiledFlow.compile(legacy_order())
    newer = json.dumps({**json.loads(SNAPSHOT), "v": 3})
    with pytest.raises(wf.UsageError, match=r"newer wfkit \(its cursor has format 3; this"):
        RunState.restore(RUN, flow, {}, newer, 8)


def test_format_1_entries_read_as_format_2_ones() -> None:
    flow = CompiledFlow.compile(legacy_order())
    run = RunState.restore(RUN, flow, json.loads(INPUT), SNAPSHOT, 8)
    for seq in (9, 10):
        run.replay(seq, DELTAS[seq], None)
    assert {e: (entry["node"], entry["state"]) for e, entry in run.saga.items()} == {
        "s2": ("reserve", "done"),
        "s5": ("charge", "done"),
        "s7": ("charge", "done"),
        "s9": ("charge", "done"),
        "s11": ("pack", "done"),
    }
    assert run.saga["s7"]["fr"] == [FrameRef("for_each-1", "f3", 1)]
    assert run.tokens["t10"] == {"node": "pause", "st": "ready", "att": 1, "fr": [], "li": None}
    assert json.loads(run.snapshot())["saga"]["s5"] == {
        "saga": "saga-1",
        "node": "charge",
        "comp": "refund",
        "pos": 2,
        "state": "done",
        "li": 0,
        "out": {"paid": "a"},
        "fr": [["for_each-1", "f3", 0]],
        "lp": [0],
        "item": "a",
    }
