"""Many engine processes on one PostgreSQL database: ``wfkit worker`` processes share the runs.

Each test gets a fresh database and launches ``wfkit worker`` processes on it (short leases, so a
dead worker's runs change hands within seconds). The test process opens its own engine only to
start runs, send signals and read results; it runs no workers. The activities
(``multiprocess_child.py``) log ``"<node> <run_id> <pid>"`` before they work, so the logs say
which process ran which step, and how often:

* no crash: 1,000 runs of a fan-out + signal + saga workflow complete, every step ran exactly
  once, and the work was spread over several processes;
* a worker stopped with SIGTERM mid-run finishes its attempts and gives its runs back at once:
  still exactly once;
* a worker SIGKILLed mid-run: the others take over its runs once its lease runs out; only the
  steps it had in flight run again (at most twice), all of them in runs it held;
* 100 senders in 10 processes signalling one wait: exactly one wins, the payload is bound once;
* a signal kept (posted) by one process is taken by a wait that opens in a worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

import wfkit as wf
from tests.postgres import postgres_database
from tests.scale import count

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("multiprocess_child.py")
WFKIT = Path(sys.executable).parent / "wfkit"
LEASE = "3s"  # a killed worker's runs change hands after this
THREADS = 4  # per worker process
STARTUP_TIMEOUT = 30.0  # seconds for the workers to print their start line
RUN_TIMEOUT = 60.0  # seconds for all runs to complete


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multiprocess_child_for_test", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


# --- worker processes -------------------------------------------------------------------------


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    out: Path

    def text(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""


@dataclass
class Cluster:
    """``wfkit worker`` processes on one database, and the activity logs they write."""

    url: str
    folder: Path
    workers: list[Worker] = field(default_factory=list)

    @property
    def logs(self) -> Path:
        return self.folder / "acts"

    def launch(self, count: int, sleep: float, lease: str = LEASE) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            child.LOG_ENV: str(self.logs),
            child.SLEEP_ENV: str(sleep),
            "COLUMNS": "400",
            "NO_COLOR": "1",
        }
        command = [str(WFKIT), "worker", "--db", self.url, "--module", str(CHILD)]
        command += ["--threads", str(THREADS), "--lease", lease]
        for i in range(len(self.workers), len(self.workers) + count):
            out = self.folder / f"worker-{i}.out"
            with out.open("wb") as sink:
                proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
            self.workers.append(Worker(proc, out))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not all("started on" in w.text() for w in self.workers):
            dead = [w for w in self.workers if w.proc.poll() is not None]
            assert not dead, f"a worker exited at start-up{self.tails()}"
            assert time.monotonic() < deadline, f"workers did not start{self.tails()}"
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers]

    def stop(self) -> dict[int, int | None]:
        """SIGTERM the live workers; their exit codes by pid (None: did not stop in time)."""
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        for w in self.workers:
            try:
                codes[w.proc.pid] = w.proc.wait(30)
            except subprocess.TimeoutExpired:
                codes[w.proc.pid] = None
        return codes

    def kill_all(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(10)

    def tails(self, size: int = 3000) -> str:
        return "".join(
            f"\n--- worker {w.proc.pid} (exit {w.proc.poll()}), tail ---\n{w.text()[-size:]}"
            for w in self.workers
        )

    def lines(self) -> list[tuple[str, str, int]]:
        """Every activity attempt logged: (node, run_id, pid)."""
        found = []
        for path in sorted(self.logs.glob("acts-*.log")):
            for raw in path.read_text().splitlines(keepends=True):
                assert raw.endswith("\n"), f"torn log line {raw!r} in {path.name}"
                node, run_id, pid = raw.split()
                found.append((node, run_id, int(pid)))
        return found


@contextmanager
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A fresh database; the workers launched on it are always ended afterwards."""
    with postgres_database() as url:
        group = Cluster(url, tmp_path)
        try:
            yield group
        finally:
            group.kill_all()


def open_engine(url: str) -> wf.Engine:
    """An engine that starts runs, sends signals and reads results (it runs no workers)."""
    return wf.Engine(url, registry=child.register(wf.ActivityRegistry()), lease=LEASE)


# --- the order workflow: start, signal, wait for completion -------------------------------------


class Signallers:
    """Threads, each with its own engine, that signal 'go' for their share of keys as soon as
    the key's wait is open."""

    def __init__(self, url: str, keys: list[str], count: int = 4) -> None:
        self.stop = threading.Event()
        self.delivered: dict[str, bool] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()
        shares = [set(keys[i::count]) for i in range(count)]
        self.threads = [
            threading.Thread(target=self._send, args=(url, share, i), daemon=True)
            for i, share in enumerate(shares)
        ]
        for t in self.threads:
            t.start()

    def _send(self, url: str, keys: set[str], i: int) -> None:
        try:
            with open_engine(url) as engine:
                while keys and not self.stop.is_set():
                    open_ = [w.key for w in engine.waiting() if w.node_id == "go" and w.key in keys]
                    for key in open_:
                        ok = engine.signal("go", key, {"by": f"sender-{i}"}, actor=f"sender-{i}")
                        with self.lock:
                            self.delivered[key] = ok
                        keys.discard(key)
                    if not open_:
                        time.sleep(0.05)
        except BaseException as exc:
            with self.lock:
                self.errors.append(f"sender {i}: {exc!r}")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def start_orders(engine: wf.Engine, count: int) -> dict[str, str]:
    """Start ``count`` order runs in batches of 100; run id by correlation key."""
    engine.register(child.ORDER)  # the workers registered it too: the same graph is a no-op
    keys = [f"order-{i:04d}" for i in range(count)]
    runs: dict[str, str] = {}
    for i in range(0, count, 100):
        batch = keys[i : i + 100]
        started = engine.start_many("mp.order", [{"key": k} for k in batch])
        runs.update({k: r.id for k, r in zip(batch, started, strict=True)})
    return runs


def wait_completed(engine: wf.Engine, count: int, group: Cluster) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    done = 0
    while time.monotonic() < deadline:
        done = len(engine.runs(status="completed", limit=count + 1))
        if done == count:
            return
        time.sleep(0.25)
    statuses = engine.sql("SELECT status, count(*) FROM wf_instances GROUP BY 1").fetchall()
    pytest.fail(f"{done} of {count} runs completed in {RUN_TIMEOUT}s: {statuses}{group.tails()}")


def check_orders(engine: wf.Engine, runs: dict[str, str]) -> None:
    """Every run completed, bound its signal once, committed its saga, and holds no lease."""
    rows = engine.sql("SELECT run_id, status, data, owner FROM wf_instances").fetchall()
    by_id = {r[0]: r for r in rows}
    assert set(by_id) == set(runs.values())
    key_of = {run_id: key for key, run_id in runs.items()}
    for run_id, status, data, owner in rows:
        doc = json.loads(data)
        assert status == "completed", (run_id, status)
        assert doc["key"] == key_of[run_id]
        assert doc["approved_by"].startswith("sender-")
        assert set(doc["done"]) == set(child.ORDER_ACTIVITIES)
        assert owner is None, f"run {run_id} ended but is still held by {owner}"
    per_run = engine.sql(
        "SELECT kind, count(*), count(DISTINCT run_id) FROM wf_events "
        "WHERE kind IN ('signal.received', 'saga.committed', 'run.completed') GROUP BY kind"
    ).fetchall()
    n = len(runs)
    assert sorted(per_run) == [
        ("run.completed", n, n),
        ("saga.committed", n, n),
        ("signal.received", n, n),
    ]


def spread(lines: list[tuple[str, str, int]]) -> str:
    per_pid = Counter(pid for _, _, pid in lines)
    runs_per_pid: dict[int, set[str]] = defaultdict(set)
    for _, run_id, pid in lines:
        runs_per_pid[pid].add(run_id)
    return ", ".join(
        f"pid {pid}: {n} steps in {len(runs_per_pid[pid])} runs"
        for pid, n in sorted(per_pid.items())
    )


def _doubles(lines: list[tuple[str, str, int]], again: dict[tuple[str, str], int]) -> str:
    """How many steps ran more than once, by node, and by which processes (a few examples)."""
    by_node = Counter(node for node, _ in again)
    pids: dict[tuple[str, str], list[int]] = defaultdict(list)
    for node, run_id, pid in lines:
        if (node, run_id) in again:
            pids[(node, run_id)].append(pid)
    examples = list(pids.items())[:10]
    return f"{len(again)} steps; by node {dict(by_node)}; e.g. {examples}"


# --- (a) no crash: exactly once, spread over the workers ----------------------------------------


def test_four_workers_complete_many_runs_each_step_exactly_once(tmp_path: Path) -> None:
    runs_wanted = count(1000, 200)
    with cluster(tmp_path) as group:
        # no worker dies here: a long lease keeps a worker starved of CPU for seconds (a busy
        # CI machine) from losing its runs, which would rightly run their steps again
        group.launch(4, sleep=0.005, lease="20s")
        with open_engine(group.url) as engine:
            began = time.monotonic()
            runs = start_orders(engine, runs_wanted)
            senders = Signallers(group.url, sorted(runs))
            try:
                wait_completed(engine, runs_wanted, group)
            finally:
                senders.close()
            took = time.monotonic() - began
            assert senders.errors == [], f"{senders.errors}{group.tails()}"
            assert senders.delivered == dict.fromkeys(runs, True)
            check_orders(engine, runs)
        codes = group.stop()
        lines = group.lines()

    assert codes == dict.fromkeys(group.pids(), 0), group.tails()
    for w in group.workers:  # one start line and one stop line each
        assert w.text().count("started on") == 1, group.tails()
        assert "stopped on SIGTERM; its runs are released" in w.text(), group.tails()
    counts = Counter((node, run_id) for node, run_id, _ in lines)
    expected = {(node, run_id) for run_id in runs.values() for node in child.ORDER_ACTIVITIES}
    assert set(counts) == expected  # every step ran, and nothing else (no compensation)
    again = {step: n for step, n in counts.items() if n != 1}
    doubles = _doubles(lines, again)
    assert again == {}, f"steps that ran more than once without a crash: {doubles}{group.tails()}"
    pids = Counter(pid for _, _, pid in lines)
    assert set(pids) <= set(group.pids())
    assert len(pids) >= 2, f"all the work went to one process: {spread(lines)}"
    print(
        f"\n(a) {runs_wanted} runs, {len(lines)} steps on 4 workers in {took:.1f}s "
        f"({runs_wanted / took:.0f} runs/s); {spread(lines)}"
    )


def test_a_worker_stopped_mid_run_finishes_its_attempts_and_hands_its_runs_over(
    tmp_path: Path,
) -> None:
    runs_wanted = count(300, 100)
    with cluster(tmp_path) as group:
        # a long lease: a worker starved of CPU for 3 s on a busy machine would rightly lose
        # its runs and see their steps run again; here nothing may lapse, only the stop hands over
        group.launch(3, sleep=0.02, lease="20s")
        leaving = group.workers[0]
        with open_engine(group.url) as engine:
            runs = start_orders(engine, runs_wanted)
            senders = Signallers(group.url, sorted(runs))
            try:
                _wait_holding(engine, group, leaving, runs_wanted)
                leaving.proc.send_signal(signal.SIGTERM)
                code = leaving.proc.wait(30)
                still_held = _held(engine, f"%:{leaving.proc.pid}:%")
                wait_completed(engine, runs_wanted, group)
            finally:
                senders.close()
            assert senders.errors == [], f"{senders.errors}{group.tails()}"
            check_orders(engine, runs)
        codes = group.stop()
        lines = group.lines()

    assert code == 0, group.tails()
    assert "stopped on SIGTERM; its runs are released" in leaving.text(), group.tails()
    assert still_held == set()  # given back on the way out, not left to expire
    assert [codes[w.proc.pid] for w in group.workers[1:]] == [0, 0], group.tails()
    counts = Counter((node, run_id) for node, run_id, _ in lines)
    expected = {(node, run_id) for run_id in runs.values() for node in child.ORDER_ACTIVITIES}
    assert set(counts) == expected
    again = {step: n for step, n in counts.items() if n != 1}
    assert again == {}, f"a graceful stop made steps run again: {again}"
    assert leaving.proc.pid in {pid for _, _, pid in lines}


def _wait_holding(engine: wf.Engine, group: Cluster, worker: Worker, total: int) -> None:
    """Until a quarter of the runs completed and ``worker`` holds runs (so it has work)."""
    owner = f"%:{worker.proc.pid}:%"
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        completed = engine.sql("SELECT count(*) FROM wf_instances WHERE status = 'completed'")
        if completed.fetchall()[0][0] >= total // 4 and _held(engine, owner):
            return
        time.sleep(0.01)
    pytest.fail(
        f"worker {worker.proc.pid} held no runs once a quarter had completed{group.tails()}"
    )


# --- (b) a worker killed mid-run: its runs change hands, in-flight steps run again ----------------


def test_a_killed_workers_runs_are_finished_by_the_others_after_its_lease(
    tmp_path: Path,
) -> None:
    runs_wanted = count(400, 100)
    with cluster(tmp_path) as group:
        group.launch(4, sleep=0.02)
        victim = group.workers[0]
        with open_engine(group.url) as engine:
            began = time.monotonic()
            runs = start_orders(engine, runs_wanted)
            senders = Signallers(group.url, sorted(runs))
            try:
                held = _kill_mid_run(engine, group, victim, runs_wanted)
                killed_at = time.monotonic()
                wait_completed(engine, runs_wanted, group)
            finally:
                senders.close()
            took = time.monotonic() - began
            assert senders.errors == [], f"{senders.errors}{group.tails()}"
            check_orders(engine, runs)
        codes = group.stop()
        lines = group.lines()

    assert codes[victim.proc.pid] == -signal.SIGKILL
    assert [codes[w.proc.pid] for w in group.workers[1:]] == [0, 0, 0], group.tails()
    counts = Counter((node, run_id) for node, run_id, _ in lines)
    pids_of: dict[tuple[str, str], list[int]] = defaultdict(list)
    for node, run_id, pid in lines:
        pids_of[(node, run_id)].append(pid)
    expected = {(node, run_id) for run_id in runs.values() for node in child.ORDER_ACTIVITIES}
    assert set(counts) == expected  # at least once each (and no compensation ran)
    assert max(counts.values()) <= 2, {s: n for s, n in counts.items() if n > 2}
    again = {step for step, n in counts.items() if n == 2}
    touched = {run_id for _, run_id, pid in lines if pid == victim.proc.pid}
    for step in again:  # a re-run is a step the killed worker had started in a run it held
        assert victim.proc.pid in pids_of[step], (step, pids_of[step])
        assert step[1] in touched and step[1] in held, step
    after = Counter(pid for node, run_id, pid in lines if run_id in held)
    rerun_nodes = dict(Counter(node for node, _ in again))
    print(
        f"\n(b) {runs_wanted} runs in {took:.1f}s ({took - (killed_at - began):.1f}s after the "
        f"kill); worker {victim.proc.pid} killed holding {len(held)} runs; "
        f"{len(again)} steps ran twice {rerun_nodes}; the held runs' steps by pid: {dict(after)}; "
        f"{spread(lines)}"
    )


def _kill_mid_run(engine: wf.Engine, group: Cluster, victim: Worker, total: int) -> set[str]:
    """SIGKILL ``victim`` once a quarter of the runs completed (the others are at every stage:
    before their wait, parked, in the saga) and it holds runs; return the runs it held then."""
    _wait_holding(engine, group, victim, total)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    return _held(engine, f"%:{victim.proc.pid}:%")  # the rows still name the dead owner


def _held(engine: wf.Engine, owner_like: str) -> set[str]:
    rows = engine.sql(f"SELECT run_id FROM wf_instances WHERE owner LIKE '{owner_like}'").fetchall()
    return {r[0] for r in rows}


# --- (c) 100 senders in 10 processes signal one wait ---------------------------------------------


def test_of_a_hundred_senders_in_ten_processes_exactly_one_resumes_the_wait(
    tmp_path: Path,
) -> None:
    processes, threads = 10, 10
    with cluster(tmp_path) as group:
        group.launch(2, sleep=0.005)
        with open_engine(group.url) as engine:
            engine.register(child.GATE)
            run = engine.start("mp.gate", {"key": "gate-1"})
            deadline = time.monotonic() + 20
            while not [w for w in engine.waiting() if w.run_id == run.id]:
                assert time.monotonic() < deadline, f"the wait never opened{group.tails()}"
                time.sleep(0.05)

            go = tmp_path / "go"
            senders: list[tuple[subprocess.Popen[bytes], Path]] = []
            try:
                for i in range(processes):
                    out = tmp_path / f"sender-{i}.out"
                    with out.open("wb") as sink:
                        command = [sys.executable, str(CHILD), "send", group.url, "open"]
                        command += ["gate-1", str(threads), str(go)]
                        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
                    senders.append((proc, out))
                deadline = time.monotonic() + 30
                while not all("ready" in out.read_text() for _, out in senders):
                    assert all(p.poll() is None for p, _ in senders), _sender_tails(senders)
                    assert time.monotonic() < deadline, _sender_tails(senders)
                    time.sleep(0.05)
                go.touch()  # every process fires its ten threads at once
                codes = [p.wait(60) for p, _ in senders]
            finally:
                for p, _ in senders:
                    if p.poll() is None:
                        p.kill()
                        p.wait(10)
            outputs = [out.read_text() for _, out in senders]
            assert codes == [0] * processes, _sender_tails(senders)
            delivered = [_delivered(text) for text in outputs]
            assert sum(delivered) == 1, _sender_tails(senders)

            deadline = time.monotonic() + 30  # (run.result() would drive the run right here)
            while run.status != wf.RunStatus.COMPLETED:
                assert time.monotonic() < deadline, f"{run.explain()}{group.tails()}"
                time.sleep(0.05)
            got = run.data["got"]
            assert len(got) == 1, got  # the payload was bound once
            received = [e for e in run.history() if e.kind == "signal.received"]
            assert len(received) == 1
            assert received[0].output == got[0]
            winner = delivered.index(1)
            assert got[0]["sender"].startswith(f"{senders[winner][0].pid}-")
        group.stop()
        steps = [(node, run_id) for node, run_id, _ in group.lines()]
    assert steps == [("mp.after", run.id)]


def _delivered(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("delivered "):
            return int(line.split()[1])
    raise AssertionError(f"no 'delivered' line in sender output:\n{text[-3000:]}")


def _sender_tails(senders: list[tuple[subprocess.Popen[bytes], Path]]) -> str:
    parts = []
    for p, out in senders:
        text = out.read_text(errors="replace") if out.exists() else ""
        parts.append(f"\n--- sender {p.pid} (exit {p.poll()}), tail ---\n{text[-2000:]}")
    return "".join(parts)


def test_a_sender_that_found_the_wait_before_another_sender_won_it_gets_false() -> None:
    """The interleaving of the test above, made deterministic with two engines: ``late`` reads
    the bookmark while ``first`` holds the run (as a sender in another process does while it
    delivers), then ``first`` delivers and lets go, then ``late`` gets the run."""
    with postgres_database() as url:
        first, late = open_engine(url), open_engine(url)
        try:
            first.register(child.GATE)
            run = first.start("mp.gate", {"key": "g"})
            first.run_until_idle()  # up to the wait (no activity before it); parked: released
            assert [w.key for w in first.waiting()] == ["g"]
            # held, as by a sender in the middle of its delivery
            with first.runtime.writer.lock:
                first.runtime.writer.take(run.id)
            answers: dict[str, object] = {}

            def send_late() -> None:
                try:
                    answers["late"] = late.signal("open", "g", {"sender": "late"})
                except Exception as exc:
                    answers["late"] = exc

            thread = threading.Thread(target=send_late)
            thread.start()
            time.sleep(0.3)  # `late` found the bookmark and waits for the run
            answers["first"] = first.signal("open", "g", {"sender": "first"})
            thread.join(10)
            received = [e.output for e in run.history() if e.kind == "signal.received"]
            assert answers == {"first": True, "late": False}, received
            assert received == [{"sender": "first"}]
        finally:
            first.close()
            late.close()


# --- the command itself, and a known gap ------------------------------------------------------


def test_wfkit_worker_refuses_a_duckdb_file_and_says_what_to_use(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    done = subprocess.run(
        [str(WFKIT), "worker", "--db", str(db), "--module", str(CHILD)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400", "NO_COLOR": "1"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "needs a PostgreSQL database" in done.stderr
    assert f"wfkit serve --db {db}" in done.stderr
    assert not db.exists()  # nothing was opened


def test_a_signal_kept_by_another_process_is_taken_when_the_wait_opens(tmp_path: Path) -> None:
    with cluster(tmp_path) as group:
        group.launch(1, sleep=0.3)  # the wait opens ~0.6 s after the start
        with open_engine(group.url) as engine:
            engine.register(child.ORDER)
            run = engine.start("mp.order", {"key": "early"})
            assert engine.post_signal("go", "early", {"by": "sender-early"}) is False  # kept
            deadline = time.monotonic() + 15
            parked = False  # the wait opened without the kept signal: it will not come now
            while run.status != wf.RunStatus.COMPLETED and not parked:
                assert time.monotonic() < deadline, f"{run.explain()}{group.tails()}"
                time.sleep(0.1)
                parked = any(w.key == "early" for w in engine.waiting())
            assert not parked, f"{run.explain()}; still kept: {_kept(engine)}"
            assert run.data["approved_by"] == "sender-early"


def _kept(engine: wf.Engine) -> list[tuple[str, str]]:
    return [tuple(r) for r in engine.sql("SELECT name, key FROM wf_signals").fetchall()]
