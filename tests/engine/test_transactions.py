"""Runs started inside the application's transaction: the application's rows and the run commit
together or not at all, and no step of a run runs before its commit.

``with engine.transaction() as tx`` on both backends; ``engine.start(..., connection=conn)``
with the caller's own psycopg connection on PostgreSQL (refused on DuckDB).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel, Field

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine
from tests.engine.helpers import is_postgres, kinds, rows
from wfkit.engine import transactions

WF_TABLES = ("wf_instances", "wf_events", "wf_jobs", "wf_bookmarks", "wf_timers")


class Order(BaseModel):
    """The checkout document: admission refuses a negative amount."""

    order_id: int
    amount: int = Field(ge=0)


def wf_counts(engine: wf.Engine) -> dict[str, int]:
    return {t: rows(engine, f"SELECT count(*) FROM {t}")[0][0] for t in WF_TABLES}


@pytest.fixture
def shop(engine: wf.Engine, acts: Activities) -> wf.Engine:
    """An engine with the app's ``orders`` table and a ``checkout`` workflow (two steps)."""
    acts.noop("charge", "ship")
    engine.register(wf.Workflow("checkout", 1, data=Order).start_with("charge").then("ship"))
    engine.sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")
    return engine


def order_rows(engine: wf.Engine) -> list[tuple[Any, ...]]:
    return rows(engine, "SELECT id, item FROM orders ORDER BY id")


def assert_no_run_exists(engine: wf.Engine, acts: Activities, run: wf.Run | None) -> None:
    """Nothing of a rolled-back run: no row, no handle that resolves, no step ever runs."""
    assert wf_counts(engine) == dict.fromkeys(WF_TABLES, 0)
    assert engine.runs() == []
    if run is not None:
        with pytest.raises(wf.UsageError, match="there is no run"):
            _ = run.status
        with pytest.raises(wf.UsageError, match="there is no run"):
            engine.run(run.id)
    engine.run_until_idle()
    assert acts.names() == []


# --- commit together ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "workers"])
def test_the_app_rows_and_the_run_commit_together(
    shop: wf.Engine, acts: Activities, workers: int
) -> None:
    if workers:
        shop.start_workers(workers)
    with shop.transaction() as tx:
        inserted = tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        run = tx.start("checkout", {"order_id": 1, "amount": 5}, actor="shop")
        seen = tx.execute("SELECT id, item FROM orders").fetchall()
        inside = tx.execute("SELECT status FROM wf_instances WHERE run_id = ?", [run.id])
        # the engine's reads on the block's thread see its rows; engine.sql reads committed ones
        assert [r.run_id for r in shop.runs()] == [run.id]
        assert kinds(run)[:1] == ["run.started"]
        assert rows(shop, "SELECT count(*) FROM orders") == [(0,)]
        time.sleep(0.2 if workers else 0)  # workers are running: still, no step starts now
        assert acts.names() == []

    assert inserted.rowcount == 1
    assert seen == [(1, "x")]
    assert inside.fetchone() is not None  # the run's row is in the transaction already
    assert order_rows(shop) == [(1, "x")]
    assert rows(shop, f"SELECT actor FROM wf_instances WHERE run_id = '{run.id}'") == [("shop",)]
    assert run.result(timeout=30) == Order(order_id=1, amount=5)
    assert run.status is wf.RunStatus.COMPLETED
    assert acts.names() == ["charge", "ship"]
    assert [r.run_id for r in shop.runs()] == [run.id]


def test_start_many_commits_every_run_with_the_block(shop: wf.Engine, acts: Activities) -> None:
    with shop.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (?, ?), (?, ?)", [1, "a", 2, "b"])
        runs = tx.start_many("checkout", [{"order_id": i, "amount": i} for i in (1, 2)])

    shop.run_until_idle()
    assert [r.status for r in runs] == [wf.RunStatus.COMPLETED] * 2
    assert order_rows(shop) == [(1, "a"), (2, "b")]
    assert sorted(acts.names()) == ["charge", "charge", "ship", "ship"]


def test_statement_results_look_the_same_on_both_databases(shop: wf.Engine) -> None:
    with shop.transaction() as tx:
        insert = tx.execute("INSERT INTO orders VALUES (?, ?), (?, ?)", (1, "a", 2, "b"))
        update = tx.execute("UPDATE orders SET item = ? WHERE id >= ?", ["50% off?", 1])
        select = tx.execute("SELECT id, item FROM orders WHERE item = ? ORDER BY id", ["50% off?"])
        returning = tx.execute("DELETE FROM orders WHERE id = ? RETURNING id", [2])
        empty = tx.execute("SELECT id FROM orders WHERE id = ?", [99])
        ddl = tx.execute("CREATE TABLE audit (note TEXT)")
        literal = tx.execute("SELECT 'what?', count(*) FROM orders").fetchall()

    assert (insert.rowcount, insert.fetchall(), insert.columns) == (2, [], [])
    assert update.rowcount == 2
    assert select.columns == ["id", "item"]
    assert select.fetchall() == [(1, "50% off?"), (2, "50% off?")]
    assert select.fetchone() == (1, "50% off?")
    assert list(select) == select.fetchall()
    assert select.rowcount == 2
    assert returning.fetchall() == [(2,)]
    assert (empty.fetchall(), empty.fetchone(), empty.rowcount) == ([], None, 0)
    assert (ddl.fetchall(), ddl.rowcount) == ([], -1)
    assert literal == [("what?", 1)]  # a ? inside a literal is text, not a placeholder
    assert order_rows(shop) == [(1, "50% off?")]


# --- rollback ----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "workers"])
def test_an_exception_in_the_block_rolls_back_the_app_rows_and_the_run(
    shop: wf.Engine, acts: Activities, workers: int
) -> None:
    if workers:
        shop.start_workers(workers)
    run: wf.Run | None = None
    with pytest.raises(RuntimeError, match="payment provider down"):
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
            run = tx.start("checkout", {"order_id": 1, "amount": 5})
            raise RuntimeError("payment provider down")

    time.sleep(0.2 if workers else 0)
    assert order_rows(shop) == []
    assert_no_run_exists(shop, acts, run)
    # the engine goes on as usual afterwards
    after = shop.start("checkout", {"order_id": 2, "amount": 1})
    assert after.result(timeout=30).order_id == 2


def test_a_rollback_leaves_a_posted_signal_for_the_next_wait(
    engine: wf.Engine, acts: Activities
) -> None:
    # the run's wait takes the posted signal inside the block; the rollback puts it back
    acts.noop("after")
    engine.register(
        wf.Workflow("paid", 1)
        .start_with()
        .wait_for_signal("paid", correlate="order", bind={"amount": "amount"})
        .then("after")
    )
    engine.post_signal("paid", "o-1", {"amount": 7})
    with pytest.raises(KeyError):
        with engine.transaction() as tx:
            taken = tx.start("paid", {"order": "o-1"})
            assert tx.execute("SELECT count(*) FROM wf_signals").fetchall() == [(0,)]
            raise KeyError("rolled back")

    assert rows(engine, "SELECT count(*) FROM wf_signals") == [(1,)]
    with pytest.raises(wf.UsageError):
        _ = taken.status
    run = engine.start("paid", {"order": "o-1"})
    engine.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED
    assert run.data["amount"] == 7
    assert acts.names() == ["after"]


def test_a_rolled_back_run_leaves_no_timer_and_no_ended_run(
    engine: wf.Engine, acts: Activities, clock: wf.ManualClock
) -> None:
    acts.noop("ship")
    engine.register(wf.Workflow("later", 1).start_with().delay("1h").then("ship"))
    engine.register(wf.Workflow("instant", 1).start_with())  # ends as it starts
    with pytest.raises(ValueError):
        with engine.transaction() as tx:
            later = tx.start("later", {})
            instant = tx.start("instant", {})
            assert instant.status is wf.RunStatus.COMPLETED  # DuckDB: read inside the block
            raise ValueError("no")

    clock.advance("2h")
    assert_no_run_exists(engine, acts, later)
    assert_no_run_exists(engine, acts, instant)

    with engine.transaction() as tx:
        kept = tx.start("instant", {})
    assert kept.status is wf.RunStatus.COMPLETED


def test_blocks_beside_a_batched_run_keep_its_checkpoints_whole(
    open_engine: OpenEngine, acts: Activities
) -> None:
    engine = open_engine(durability="batched")
    acts.noop("charge", "ship", "step")
    engine.register(wf.Workflow("checkout", 1, data=Order).start_with("charge").then("ship"))
    chain = wf.Workflow("chain", 1).start_with("step")
    for _ in range(39):
        chain = chain.then("step")
    engine.register(chain)
    engine.sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")
    engine.start_workers(2)
    long = engine.start("chain", {})
    made = []
    for i in range(5):
        with engine.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [i, "x"])
            made.append(tx.start("checkout", {"order_id": i, "amount": i}))

    assert long.result(timeout=60) == {}
    assert [r.result(timeout=30).order_id for r in made] == list(range(5))
    seqs = [e.seq for e in long.history()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert acts.count("step") == 40
    assert len(order_rows(engine)) == 5


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_child_run_started_by_a_call_commits_or_vanishes_with_the_block(
    engine: wf.Engine, acts: Activities, outcome: str
) -> None:
    acts.noop("pay", "ship")
    engine.register(wf.Workflow("payment", 1).start_with("pay"))
    engine.register(wf.Workflow("shop", 1).start_with().call("payment").then("ship"))
    with pytest.raises(ValueError) if outcome == "rollback" else _nothing():
        with engine.transaction() as tx:
            run = tx.start("shop", {"total": 3})
            assert rows(engine, "SELECT count(*) FROM wf_instances") == [(0,)]
            sql = "SELECT run_id FROM wf_instances WHERE workflow_id = ?"
            child_id = tx.execute(sql, ["payment"]).fetchall()[0][0]
            if outcome == "rollback":
                raise ValueError("no")

    if outcome == "rollback":
        assert_no_run_exists(engine, acts, run)
        with pytest.raises(wf.UsageError, match="there is no run"):
            engine.run(child_id)
        return
    engine.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED
    assert acts.names() == ["pay", "ship"]
    assert rows(engine, "SELECT workflow_id, status FROM wf_instances ORDER BY 1") == [
        ("payment", "completed"),
        ("shop", "completed"),
    ]


def test_a_refused_admission_can_be_caught_and_the_block_goes_on(
    shop: wf.Engine, acts: Activities
) -> None:
    with shop.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        with pytest.raises(wf.AdmissionError, match="nothing was written") as info:
            tx.start("checkout", {"order_id": 1, "amount": -5})
        run = tx.start("checkout", {"order_id": 1, "amount": 5})

    assert "amount" in str(info.value)
    shop.run_until_idle()
    assert order_rows(shop) == [(1, "x")]
    assert [r.run_id for r in shop.runs()] == [run.id]
    assert run.status is wf.RunStatus.COMPLETED


def test_a_refused_admission_left_uncaught_rolls_back_everything(
    shop: wf.Engine, acts: Activities
) -> None:
    with pytest.raises(wf.AdmissionError):
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
            first = tx.start("checkout", {"order_id": 1, "amount": 5})
            tx.start("checkout", {"order_id": 2, "amount": -1})

    assert order_rows(shop) == []
    assert_no_run_exists(shop, acts, first)


def test_a_failed_statement_rolls_back_the_block(shop: wf.Engine, acts: Activities) -> None:
    with pytest.raises(wf.StoreError, match="rolled back when the block ends") as info:
        with shop.transaction() as tx:
            run = tx.start("checkout", {"order_id": 1, "amount": 5})
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "duplicate"])

    assert info.value.__cause__ is not None  # the driver's error
    assert order_rows(shop) == []
    assert_no_run_exists(shop, acts, run)


def test_a_failed_statement_that_is_caught_still_rolls_back(
    shop: wf.Engine, acts: Activities
) -> None:
    with pytest.raises(wf.StoreError, match="the transaction was rolled back, nothing of it"):
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
            run = tx.start("checkout", {"order_id": 1, "amount": 5})
            with pytest.raises(wf.StoreError):
                tx.execute("SELECT no_such_column FROM orders")
            with pytest.raises(wf.UsageError, match="can only roll back"):
                tx.execute("INSERT INTO orders VALUES (?, ?)", [2, "y"])
            with pytest.raises(wf.UsageError, match="can only roll back"):
                tx.start("checkout", {"order_id": 2, "amount": 5})

    assert order_rows(shop) == []
    assert_no_run_exists(shop, acts, run)


def test_a_commit_the_database_refuses_leaves_nothing(pg_shop: wf.Engine, acts: Activities) -> None:
    # a deferred constraint is checked at COMMIT: the block's end fails, not a statement
    pg_shop.sql(
        "CREATE TABLE ledger (ref INTEGER, CONSTRAINT one_ref UNIQUE (ref) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )
    pg_shop.start_workers(2)
    with pytest.raises(wf.StoreError, match="committing the transaction") as info:
        with pg_shop.transaction() as tx:
            tx.execute("INSERT INTO ledger VALUES (?), (?)", [1, 1])
            run = tx.start("checkout", {"order_id": 1, "amount": 5})

    assert "one_ref" in str(info.value)
    time.sleep(0.3)
    assert rows(pg_shop, "SELECT count(*) FROM ledger") == [(0,)]
    assert_no_run_exists(pg_shop, acts, run)


def test_a_closed_engine_opens_no_transaction(shop: wf.Engine) -> None:
    shop.close()
    with pytest.raises(wf.UsageError, match="is closed"):
        with shop.transaction():
            pass


# --- misuse ------------------------------------------------------------------------------------


def test_transaction_control_and_bad_params_are_refused(shop: wf.Engine) -> None:
    with shop.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        for sql in ("COMMIT", "  -- done\n rollback", "SELECT 1; BEGIN", "SAVEPOINT s"):
            with pytest.raises(wf.UsageError, match="block's transaction commits when"):
                tx.execute(sql)
        with pytest.raises(wf.UsageError, match="list or tuple"):
            tx.execute("SELECT * FROM orders WHERE item = ?", "x")  # type: ignore[arg-type]
        assert tx.execute("SELECT 'commit'").fetchall() == [("commit",)]

    assert order_rows(shop) == [(1, "x")]  # refused statements do not spoil the block


def test_engine_calls_that_would_escape_the_block_are_refused(
    shop: wf.Engine, acts: Activities
) -> None:
    with shop.transaction() as tx:
        run = tx.start("checkout", {"order_id": 1, "amount": 5})
        with pytest.raises(wf.UsageError, match=r"use tx.start|tx.start\(\.\.\.\)") as info:
            shop.start("checkout", {"order_id": 2, "amount": 5})
        assert "inside a `with engine.transaction() as tx:` block" in str(info.value)
        with pytest.raises(wf.UsageError, match="nested"):
            with shop.transaction():
                pass
        with pytest.raises(wf.UsageError, match="run_until_idle"):
            shop.run_until_idle()
        with pytest.raises(wf.UsageError, match=r"run\.result"):
            run.result(timeout=1)
        with pytest.raises(wf.UsageError, match="register"):
            shop.register(wf.Workflow("other", 1).start_with("charge"))
        with pytest.raises(wf.UsageError, match="signal"):
            shop.signal("paid", "k", {})
        with pytest.raises(wf.UsageError, match="deactivate"):
            shop.deactivate("checkout", 1)
        with pytest.raises(wf.UsageError, match="signal"):
            shop.purge(older_than="1d")

    shop.run_until_idle()
    assert [r.run_id for r in shop.runs()] == [run.id]  # only the block's run: it committed
    assert run.status is wf.RunStatus.COMPLETED
    assert shop.workflows() == {"checkout": [1]}


def test_a_transaction_belongs_to_its_block_and_its_thread(shop: wf.Engine) -> None:
    tx = shop.transaction()
    with pytest.raises(wf.UsageError, match="needs an open block"):
        tx.execute("SELECT 1")
    errors: list[BaseException] = []
    with tx:
        thread = threading.Thread(
            target=lambda: errors.append(_raised(lambda: tx.execute("SELECT 1")))
        )
        thread.start()
        thread.join(10)
    assert not thread.is_alive()
    assert isinstance(errors[0], wf.UsageError) and "another thread" in str(errors[0])
    with pytest.raises(wf.UsageError, match="has ended"):
        tx.start("checkout", {"order_id": 1, "amount": 1})
    with pytest.raises(wf.UsageError, match="used already"):
        with tx:
            pass


def _raised(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:
        return exc
    return None


def test_a_block_held_long_is_logged(
    shop: wf.Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(transactions, "HOLD_WARNING", 0.05)
    with caplog.at_level(logging.WARNING, logger="wfkit.engine"), shop.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        time.sleep(0.3)
    warned = [r.getMessage() for r in caplog.records if "transaction() block" in r.getMessage()]
    assert len(warned) == 1 and "keep blocks short" in warned[0]
    assert order_rows(shop) == [(1, "x")]


# --- other threads -----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "workers"])
def test_another_threads_start_during_a_block_completes(
    shop: wf.Engine, acts: Activities, db_path: Any, workers: int
) -> None:
    if workers:
        shop.start_workers(workers)
    started: list[wf.Run] = []
    returned_at: list[float] = []

    def other() -> None:
        started.append(shop.start("checkout", {"order_id": 2, "amount": 1}))
        returned_at.append(time.monotonic())

    with shop.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        mine = tx.start("checkout", {"order_id": 1, "amount": 5})
        if not is_postgres(db_path):  # DuckDB: the block holds the one writer
            assert returned_at == []
        ended = time.monotonic()
    thread.join(30)

    assert not thread.is_alive()
    if not is_postgres(db_path):
        assert returned_at[0] >= ended
    shop.run_until_idle()
    for run in (mine, started[0]):
        assert run.result(timeout=30).amount in (1, 5)
    assert acts.count("charge") == 2
    assert order_rows(shop) == [(1, "x")]


def test_a_thread_waiting_on_a_parked_run_does_not_deadlock_a_block(
    shop: wf.Engine, acts: Activities
) -> None:
    # the waiter reads a parked run from the store (under the writer lock) while it holds the
    # scheduler's condition: the block must never wait for that condition holding the writer
    shop.register(wf.Workflow("parked", 1).start_with().wait_for_signal("go"))
    parked = shop.start("parked", {})
    shop.start_workers(2)
    waited: list[BaseException | None] = []
    waiter = threading.Thread(target=lambda: waited.append(_raised(lambda: parked.result(1.5))))
    done = threading.Event()

    def block() -> None:
        with shop.transaction() as tx:
            waiter.start()
            time.sleep(0.3)  # the waiter is now blocked on the writer this block holds
            tx.start("checkout", {"order_id": 1, "amount": 1})
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
        done.set()

    opener = threading.Thread(target=block, daemon=True)
    opener.start()
    assert done.wait(20), "the block deadlocked"
    waiter.join(20)
    assert order_rows(shop) == [(1, "x")]
    assert parked.status is wf.RunStatus.WAITING
    assert waited and waited[0] is not None  # it timed out waiting, as asked


def test_blocks_on_many_threads_and_plain_starts_all_commit(
    shop: wf.Engine, acts: Activities
) -> None:
    # more blocks at once than the engine's own connection pool holds (PostgreSQL: 4)
    shop.start_workers(2)
    blocks, plain = 6, 2
    barrier = threading.Barrier(blocks + plain)
    made: dict[int, wf.Run] = {}

    def block(i: int) -> None:
        barrier.wait(10)
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [i, f"item-{i}"])
            made[i] = tx.start("checkout", {"order_id": i, "amount": i})
            time.sleep(0.05)

    def start(i: int) -> None:
        barrier.wait(10)
        made[i] = shop.start("checkout", {"order_id": i, "amount": i})

    threads = [threading.Thread(target=block, args=(i,)) for i in range(blocks)]
    threads += [threading.Thread(target=start, args=(blocks + i,)) for i in range(plain)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not any(t.is_alive() for t in threads)
    assert order_rows(shop) == [(i, f"item-{i}") for i in range(blocks)]
    assert {i: r.result(timeout=30).order_id for i, r in made.items()} == {
        i: i for i in range(blocks + plain)
    }
    assert acts.count("ship") == blocks + plain


# --- the caller's own connection ---------------------------------------------------------------


def test_connection_is_refused_on_duckdb_and_writes_nothing(
    shop: wf.Engine, db_path: Any, acts: Activities
) -> None:
    if is_postgres(db_path):
        pytest.skip("DuckDB refuses connection=: it has one connection")
    with pytest.raises(wf.UsageError, match=r"needs PostgreSQL.*engine\.transaction\(\)"):
        shop.start("checkout", {"order_id": 1, "amount": 5}, connection=object())
    assert_no_run_exists(shop, acts, None)


@pytest.fixture
def pg_shop(shop: wf.Engine, db_path: Any) -> wf.Engine:
    if not is_postgres(db_path):
        pytest.skip("PostgreSQL only: the caller's own connection, deferred constraints")
    return shop


@pytest.mark.parametrize(
    ("autocommit", "run_first"),
    [(False, False), (False, True), (True, False)],
    ids=["implicit", "implicit-run-first", "conn.transaction"],
)
def test_a_run_started_on_the_callers_connection_commits_with_it(
    pg_shop: wf.Engine, acts: Activities, db_path: str, autocommit: bool, run_first: bool
) -> None:
    import psycopg

    pg_shop.start_workers(2)
    with psycopg.connect(db_path, autocommit=autocommit) as conn:
        block = conn.transaction() if autocommit else _nothing()
        with block:
            doc = {"order_id": 1, "amount": 5}
            if run_first:  # the run's rows open the connection's (implicit) transaction
                run = pg_shop.start("checkout", doc, connection=conn)
            conn.execute("INSERT INTO orders VALUES (%s, %s)", [1, "x"])
            if not run_first:
                run = pg_shop.start("checkout", doc, connection=conn)
            time.sleep(0.5)  # workers run, but the run is not committed: no step may start
            assert acts.names() == []
            assert order_rows(pg_shop) == []
            assert pg_shop.runs() == []
        if not autocommit:
            conn.commit()

        assert run.result(timeout=30) == Order(order_id=1, amount=5)
    assert acts.names() == ["charge", "ship"]
    assert order_rows(pg_shop) == [(1, "x")]


def test_a_run_started_on_the_callers_connection_vanishes_with_its_rollback(
    pg_shop: wf.Engine, acts: Activities, db_path: str
) -> None:
    import psycopg

    pg_shop.start_workers(2)
    with psycopg.connect(db_path) as conn:
        conn.execute("INSERT INTO orders VALUES (%s, %s)", [1, "x"])
        runs = pg_shop.start_many(
            "checkout",
            [{"order_id": 1, "amount": 5}, {"order_id": 2, "amount": 6}],
            connection=conn,
        )
        time.sleep(0.3)
        assert acts.names() == []
        conn.rollback()
        # the connection goes on as usual: a later transaction of it commits a run
        later = pg_shop.start("checkout", {"order_id": 3, "amount": 7}, connection=conn)
        conn.commit()

    assert later.result(timeout=30).order_id == 3
    time.sleep(0.3)
    assert acts.names() == ["charge", "ship"]
    assert order_rows(pg_shop) == []
    assert [r.run_id for r in pg_shop.runs()] == [later.id]
    for run in runs:
        with pytest.raises(wf.UsageError, match="there is no run"):
            _ = run.status


def test_a_refused_admission_leaves_the_callers_transaction_usable(
    pg_shop: wf.Engine, acts: Activities, db_path: str
) -> None:
    import psycopg

    with psycopg.connect(db_path) as conn:
        conn.execute("INSERT INTO orders VALUES (%s, %s)", [1, "x"])
        with pytest.raises(wf.AdmissionError):
            pg_shop.start("checkout", {"order_id": 1, "amount": -1}, connection=conn)
        run = pg_shop.start("checkout", {"order_id": 1, "amount": 1}, connection=conn)
        conn.commit()

    pg_shop.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED
    assert order_rows(pg_shop) == [(1, "x")]


def test_unusable_connections_are_refused(
    pg_shop: wf.Engine, acts: Activities, db_path: str, open_engine: OpenEngine
) -> None:
    import psycopg

    from tests.postgres import ADMIN_URL

    doc = {"order_id": 1, "amount": 1}
    with psycopg.connect(ADMIN_URL) as other:
        with pytest.raises(wf.UsageError, match="pass a connection to the engine's database"):
            pg_shop.start("checkout", doc, connection=other)
    with psycopg.connect(db_path) as conn:
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT no_such_column FROM orders")
        with pytest.raises(wf.UsageError, match="roll it back"):
            pg_shop.start("checkout", doc, connection=conn)
    with pytest.raises(wf.UsageError, match="closed"):
        pg_shop.start("checkout", doc, connection=conn)
    with pytest.raises(wf.UsageError, match="psycopg"):
        pg_shop.start("checkout", doc, connection="postgresql://elsewhere")
    assert_no_run_exists(pg_shop, acts, None)


class _nothing:
    """A context manager that does nothing (the connection's implicit transaction)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
