"""The figures README.md and docs/semantics.md §21.4 give for ``engine.transaction()`` blocks,
checked as stated (no constant patched): a block open for more than 5 s is logged, one open for
less is not; on PostgreSQL blocks take connections from a pool of 8 of their own, so a ninth
block waits for one while the engine's own statements go on."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities
from tests.engine.test_transactions import Order, is_postgres, order_rows


@pytest.fixture
def shop(engine: wf.Engine, acts: Activities) -> wf.Engine:
    """The ``checkout`` workflow (two steps) and the application's ``orders`` table."""
    acts.noop("charge", "ship")
    engine.register(wf.Workflow("checkout", 1, data=Order).start_with("charge").then("ship"))
    engine.sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")
    return engine


def held_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "transaction() block" in r.getMessage()]


def test_a_block_open_under_5_s_is_not_logged_and_one_open_over_5_s_is(
    shop: wf.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="wfkit.engine"):
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "short"])
            time.sleep(4.2)
        assert held_warnings(caplog) == []

        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [2, "long"])
            time.sleep(5.6)

    warned = held_warnings(caplog)
    assert len(warned) == 1
    assert "has been open for 5." in warned[0] and "keep blocks short" in warned[0]
    assert order_rows(shop) == [(1, "short"), (2, "long")]


def test_postgres_blocks_take_8_connections_of_their_own_and_a_ninth_waits(
    shop: wf.Engine, acts: Activities, db_path: Any
) -> None:
    if not is_postgres(db_path):
        pytest.skip("PostgreSQL only: DuckDB blocks hold the one writer, not a connection")
    release = threading.Event()
    inside: list[int] = []
    lock = threading.Lock()

    def block(i: int) -> None:
        with shop.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?, ?)", [i, f"item-{i}"])
            with lock:
                inside.append(i)
            release.wait(30)

    eight = [threading.Thread(target=block, args=(i,)) for i in range(8)]
    threads = list(eight)
    try:
        for thread in eight:
            thread.start()
        deadline = time.monotonic() + 10
        while len(inside) < 8 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(inside) == list(range(8))  # eight blocks open at once

        ninth_inside = threading.Event()

        def ninth() -> None:
            with shop.transaction() as tx:
                ninth_inside.set()
                tx.execute("INSERT INTO orders VALUES (?, ?)", [8, "item-8"])

        waiting = threading.Thread(target=ninth)
        threads.append(waiting)
        waiting.start()
        assert not ninth_inside.wait(1.0)  # the ninth waits for a connection of the blocks' pool

        # the engine's own connections are not the blocks': a run starts and finishes meanwhile
        run = shop.start("checkout", {"order_id": 99, "amount": 1})
        shop.run_until_idle()
        assert run.status is wf.RunStatus.COMPLETED
        assert acts.names() == ["charge", "ship"]
        assert not ninth_inside.is_set()

        release.set()
        for thread in [*eight, waiting]:
            thread.join(30)
        assert ninth_inside.is_set()
    finally:
        release.set()  # a failed assertion above must not leave blocks open
        for thread in threads:
            thread.join(30)
    assert order_rows(shop) == [(i, f"item-{i}") for i in range(9)]
