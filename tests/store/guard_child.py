"""Child process for ``test_duckdb_guard.py``: start runs on a DuckDB file, then die at once.

Usage: ``python guard_child.py DB RUNS [--copy-wal-at K] [--delete-wal-at K] [--payload N]
[--file-limit BYTES]``

Each run has one step, ``guard.step``; no worker runs, so a run's only event is ``run.started``.
The script prints one JSON line per start: ``{"run": id}`` when it was acknowledged,
``{"error": message}`` when it was refused. It ends with ``os._exit(0)``: the engine is not
closed, so DuckDB's write-ahead log still holds every commit since the last checkpoint.

- ``--copy-wal-at K``: after K starts, copy the write-ahead log to ``DB.wal.at-K``.
- ``--delete-wal-at K``: after K starts, delete the write-ahead log (the engine goes on).
- ``--then-delete-wal-and-check``: at the end, delete the write-ahead log and check the store
  (what ``/health`` does), then die without another write.
- ``--payload N``: give each run N random bytes of data (hex), so that files grow.
- ``--file-limit BYTES``: no file of this process may grow past BYTES (RLIMIT_FSIZE, SIGXFSZ
  ignored: the write fails with EFBIG); at the first refused start the limit is lifted and one
  more run is started.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal

import wfkit as wf

FLOW = wf.Workflow("guard.flow").start_with("guard.step")


def make_engine(db: str) -> wf.Engine:
    """An engine on ``db`` with ``guard.flow`` registered."""
    registry = wf.ActivityRegistry()
    registry.register("guard.step", lambda ctx: None)
    engine = wf.Engine(db, registry=registry)
    engine.register(FLOW)
    return engine


def start(engine: wf.Engine, payload: int) -> bool:
    """Start one run and say how it went; True when it was acknowledged."""
    data = {"pad": os.urandom(payload).hex()} if payload else {}
    try:
        run = engine.start("guard.flow", data)
    except wf.StoreError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return False
    print(json.dumps({"run": run.id}), flush=True)
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("runs", type=int)
    parser.add_argument("--copy-wal-at", type=int)
    parser.add_argument("--delete-wal-at", type=int)
    parser.add_argument("--payload", type=int, default=0)
    parser.add_argument("--file-limit", type=int)
    parser.add_argument("--then-delete-wal-and-check", action="store_true")
    args = parser.parse_args()
    engine = make_engine(args.db)
    wal = f"{args.db}.wal"
    if args.file_limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.file_limit, hard))
    for done in range(args.runs):
        if done == args.copy_wal_at:
            shutil.copyfile(wal, f"{wal}.at-{done}")
        if done == args.delete_wal_at:
            os.remove(wal)
        if not start(engine, args.payload) and args.file_limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
            start(engine, args.payload)
            break
    if args.then_delete_wal_and_check:
        os.remove(wal)
        engine.runtime.store.check()
    os._exit(0)


if __name__ == "__main__":
    main()
