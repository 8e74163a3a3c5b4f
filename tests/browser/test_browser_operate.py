"""Operating runs from a real browser: the RunMonitor colours nodes as a run advances, the Inbox
approves a waiting approval (and sends a signal), the Recovery panel skips a failed compensation.

Every test checks the engine's own view of the run, written by the notebook's kernel to a JSON
file (see conftest.py), not only what the page shows.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GREEN = "rgb(200, 230, 201)"  # surface.css: g.node.succeeded is filled #c8e6c9


def css_token(text: str) -> str:
    """What wfkit.widgets.confirm.css_token makes of a run or node id in a CSS class."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def kinds(state: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in state["events"]]


def event(state: dict[str, Any], kind: str, node: str | None = None) -> dict[str, Any]:
    found = [
        e for e in state["events"] if e["kind"] == kind and (node is None or e["node"] == node)
    ]
    assert found, f"no {kind} event of {node}: {kinds(state)}"
    return dict(found[-1])


ENGINE = """
import wfkit as wf
from pathlib import Path

registry = wf.ActivityRegistry()
engine = wf.Engine(str(Path(TMP) / "runs.duckdb"), registry=registry)
"""


# --- (b) the run monitor --------------------------------------------------------------------

MONITOR = """
from wfkit.widgets import RunMonitor


def gated(ctx):
    # each step waits until the test creates the file go-<node>: the test paces the run
    gate = Path(TMP) / f"go-{ctx.node_id}"
    deadline = time.monotonic() + 120
    while not gate.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened {gate}")
        time.sleep(0.05)
    ctx.data.setdefault("done", []).append(ctx.node_id)


for name in ("orders.pick", "orders.pack", "orders.ship"):
    registry.register(name, gated)
engine.register(
    wf.Workflow("shipping", 1).start_with("orders.pick").then("orders.pack").then("orders.ship")
)
run = engine.start("shipping", {"order": "o-17"})
engine.start_workers(threads=2)
monitor = RunMonitor(engine, run, interval=0.2)
monitor.surface.observe(lambda c: record(surface_status=dict(c["new"])), names="status")
record(run_id=run.id, surface_status=dict(monitor.surface.status))
watch(lambda: run_state(run))
monitor
"""


def test_the_monitor_turns_nodes_green_as_the_run_advances(
    voila, page, notebook, screenshot
) -> None:
    notebook.write(ENGINE, MONITOR)
    voila.open(page, notebook, ".wfkit-monitor .wfkit-surface[data-ready='true']")
    graph = page.locator(".wfkit-monitor-graph")

    def node(node_id: str) -> Any:
        return graph.locator(f"g.node[data-node-id='{node_id}']")

    state = notebook.wait_for(
        lambda s: (
            s["nodes"].get("orders.pick") == "running"
            and s["surface_status"].get("orders.pick") == "running"
        ),
        "orders.pick running in the engine and on the monitor's surface",
    )
    assert state["status"] == "running"
    assert "orders.pack" not in state["nodes"]
    expect(node("orders.pick")).to_have_class(re.compile(r"\brunning\b"))
    expect(node("orders.pack")).not_to_have_class(re.compile(r"\b(running|succeeded)\b"))

    (notebook.folder / "go-orders.pick").touch()
    notebook.wait_for(
        lambda s: (
            s["surface_status"].get("orders.pick") == "succeeded"
            and s["surface_status"].get("orders.pack") == "running"
        ),
        "orders.pick succeeded and orders.pack running on the surface",
    )
    expect(node("orders.pick")).to_have_class(re.compile(r"\bsucceeded\b"))
    expect(node("orders.pick")).to_have_attribute("data-status", "succeeded")
    expect(node("orders.pack")).to_have_class(re.compile(r"\brunning\b"))

    (notebook.folder / "go-orders.pack").touch()
    (notebook.folder / "go-orders.ship").touch()
    state = notebook.wait_for(
        lambda s: (
            s["status"] == "completed"
            and all(
                s["surface_status"].get(n) == "succeeded"
                for n in ("orders.pick", "orders.pack", "orders.ship")
            )
        ),
        "the run completed with every step green on the surface",
    )
    assert state["data"]["done"] == ["orders.pick", "orders.pack", "orders.ship"]
    for step in ("orders.pick", "orders.pack", "orders.ship"):
        expect(node(step)).to_have_class(re.compile(r"\bsucceeded\b"))
        shape = node(step).locator("polygon, ellipse, path").first
        fill = shape.evaluate("e => getComputedStyle(e).fill")
        assert fill == GREEN, f"{step} is filled {fill}, not green"
    expect(page.locator(".wfkit-monitor-header .wfkit-status-completed")).to_be_visible()
    expect(
        page.locator(".wfkit-monitor-events tr.wfkit-event[data-kind='run.completed']")
    ).to_have_count(1)
    screenshot(page.locator(".wfkit-monitor"), "monitor.png")


# --- (c) the inbox ----------------------------------------------------------------------------

INBOX = """
from wfkit.widgets import Inbox

registry.register("orders.prepare", lambda ctx: None)
registry.register("orders.ship", lambda ctx: ctx.data.update(shipped=True))
registry.register("stock.count", lambda ctx: None)
engine.register(
    wf.Workflow("refund", 1)
    .start_with("orders.prepare")
    .approval("review", assignees=["finance"])
    .then("orders.ship")
)
engine.register(
    wf.Workflow("restock", 1)
    .start_with("stock.count")
    .wait_for_signal("delivery", correlate="sku", bind={"crates": "crates"})
    .then("orders.ship")
)
approval_run = engine.start("refund", {"order": "o-42", "amount": 120})
signal_run = engine.start("restock", {"sku": "sku-9"})
engine.run_until_idle()
assert approval_run.status.value == signal_run.status.value == "waiting"
engine.start_workers(threads=1)
inbox = Inbox(engine, actor="ana")
record(approval_run=approval_run.id, signal_run=signal_run.id)
watch(lambda: {"approval": run_state(approval_run), "signal": run_state(signal_run),
               "waiting": sorted(w.node_id for w in engine.waiting())})
inbox
"""


def test_approving_in_the_inbox_lets_the_run_continue(voila, page, notebook, screenshot) -> None:
    notebook.write(ENGINE, INBOX)
    voila.open(page, notebook, ".wfkit-inbox .wfkit-inbox-item")
    state = notebook.wait_for(lambda s: s["waiting"] == ["delivery", "review"], "two open waits")
    run_id = state["approval_run"]
    row = page.locator(f".wfkit-inbox-approval.wfkit-run-{css_token(run_id)}.wfkit-node-review")
    expect(row).to_have_count(1)
    expect(page.locator(".wfkit-inbox-summary")).to_contain_text("2 open")
    row.locator(".wfkit-inbox-comment input").fill("refund checked against the order")
    screenshot(page.locator(".wfkit-inbox"), "inbox.png")

    row.locator(".wfkit-inbox-approve").click()  # asks first, in the row; No does nothing
    confirm = row.locator(".wfkit-confirm")
    expect(confirm.locator(".wfkit-confirm-question")).to_contain_text("Really approve review")
    expect(confirm.locator(".wfkit-confirm-question")).to_contain_text(
        "Recorded as approved by ana"
    )
    confirm.locator(".wfkit-confirm-no").click()
    expect(confirm).to_be_hidden()
    assert notebook.state()["approval"]["status"] == "waiting"
    row.locator(".wfkit-inbox-approve").click()
    confirm.locator(".wfkit-confirm-yes").click()
    state = notebook.wait_for(
        lambda s: s["approval"]["status"] == "completed", "the approved run completed"
    )
    approved = event(state["approval"], "approval.approved", "review")
    assert approved["actor"] == "ana"
    assert approved["output"]["comment"] == "refund checked against the order"
    assert state["approval"]["outputs"]["review"]["approved"] is True
    assert state["approval"]["data"]["shipped"] is True
    assert state["approval"]["nodes"]["review"] == "succeeded"
    assert state["waiting"] == ["delivery"]  # the other run still waits for its signal
    assert state["signal"]["status"] == "waiting"
    expect(page.locator(".wfkit-inbox-message.wfkit-ok")).to_contain_text("approved review")
    expect(page.locator(".wfkit-inbox-approval")).to_have_count(0)


def test_the_inbox_refuses_a_bad_payload_then_sends_a_good_one(voila, page, notebook) -> None:
    notebook.write(ENGINE, INBOX)
    voila.open(page, notebook, ".wfkit-inbox .wfkit-inbox-signal")
    state = notebook.wait_for(lambda s: "delivery" in s["waiting"], "the signal wait open")
    row = page.locator(f".wfkit-inbox-signal.wfkit-run-{css_token(state['signal_run'])}")
    payload = row.locator(".wfkit-inbox-payload textarea")

    payload.fill('{"crates": 3')  # not JSON: refused in the page, the wait stays open
    row.locator(".wfkit-inbox-send").click()
    expect(row.locator(".wfkit-inbox-error.wfkit-error")).to_contain_text("not valid JSON")
    state = notebook.wait_for(lambda s: s["signal"]["status"] == "waiting", "still waiting")
    assert "signal.received" not in kinds(state["signal"])

    payload.fill('{"crates": 3}')
    row.locator(".wfkit-inbox-send").click()
    expect(row.locator(".wfkit-confirm-question")).to_contain_text("Really send signal 'delivery'")
    row.locator(".wfkit-confirm-yes").click()
    state = notebook.wait_for(
        lambda s: s["signal"]["status"] == "completed", "the signalled run completed"
    )
    assert state["signal"]["data"]["crates"] == 3
    assert event(state["signal"], "signal.received", "delivery")["actor"] == "ana"
    assert state["approval"]["status"] == "waiting"  # the approval was not touched
    expect(page.locator(".wfkit-inbox-message.wfkit-ok")).to_contain_text("sent signal 'delivery'")


# --- (d) the recovery panel -------------------------------------------------------------------

RECOVERY = """
from wfkit.widgets import Recovery


def release(ctx):
    raise ConnectionError("inventory service unreachable: cannot release the reservation")


def charge(ctx):
    raise RuntimeError(f"card declined for order {ctx.data['order']}")


registry.register("stock.reserve", lambda ctx: ctx.data.update(reserved=True))
registry.register("stock.release", release)
registry.register("card.charge", charge)
registry.register("mail.receipt", lambda ctx: None)
engine.register(
    wf.Workflow("checkout", 1)
    .start_with()
    .saga(
        lambda s: s.then("stock.reserve")
        .compensate_with("stock.release", policy={"max_attempts": 1})
        .then("card.charge", max_attempts=1)
        .on_failure("compensate"),
        label="checkout",
    )
    .then("mail.receipt")
)
run = engine.start("checkout", {"order": "o-7"})
engine.run_until_idle()
assert run.status.value == "suspended", run.explain()
engine.start_workers(threads=1)
recovery = Recovery(engine, actor="ops-oncall")
record(run_id=run.id)
watch(lambda: run_state(run))
recovery
"""


def test_skipping_a_failed_compensation_ends_the_run_failed(
    voila, page, notebook, screenshot
) -> None:
    notebook.write(ENGINE, RECOVERY)
    voila.open(page, notebook, ".wfkit-recovery .wfkit-recovery-item")
    state = notebook.wait_for(lambda s: s["status"] == "suspended", "the run suspended")
    assert state["nodes"]["stock.reserve"] == "compensating"
    row = page.locator(f".wfkit-recovery-compensation.wfkit-run-{css_token(state['run_id'])}")
    expect(row).to_have_count(1)
    expect(row.locator(".wfkit-recovery-reason")).to_contain_text("stock.release")
    confirm = page.locator(".wfkit-recovery .wfkit-confirm")

    row.locator(".wfkit-recovery-skip").click()  # asks first; No does nothing
    expect(confirm.locator(".wfkit-confirm-question")).to_contain_text("Really skip")
    confirm.locator(".wfkit-confirm-no").click()
    expect(confirm).to_be_hidden()
    assert notebook.state()["status"] == "suspended"

    row.locator(".wfkit-recovery-skip").click()
    expect(confirm.locator(".wfkit-confirm-question")).to_contain_text("Really skip")
    screenshot(page.locator(".wfkit-recovery"), "recovery.png")
    confirm.locator(".wfkit-confirm-yes").click()
    state = notebook.wait_for(lambda s: s["status"] == "failed", "the run failed after the skip")
    assert state["nodes"]["stock.reserve"] == "skipped"
    assert state["nodes"]["card.charge"] == "failed"
    assert event(state, "compensation.skipped", "stock.reserve")["actor"] == "ops-oncall"
    assert state["nodes"]["mail.receipt"] == "skipped"  # the failed run never reached it
    assert kinds(state).index("compensation.skipped") < kinds(state).index("run.failed")
    expect(page.locator(".wfkit-recovery-message.wfkit-ok")).to_contain_text("skipped")


# --- the dashboard ----------------------------------------------------------------------------

DASHBOARD = """
from wfkit.widgets import Dashboard

registry.register("orders.prepare", lambda ctx: None)
registry.register("orders.ship", lambda ctx: ctx.data.update(shipped=True))
engine.register(
    wf.Workflow("refund", 1).start_with("orders.prepare").approval("review").then("orders.ship")
)
done = engine.start("refund", {"order": "o-1"})
engine.run_until_idle()
engine.approve(done.id, "review", actor="bo")
run = engine.start("refund", {"order": "o-2"})
engine.run_until_idle()
engine.start_workers(threads=1)
board = Dashboard(engine, actor="ana", interval=0.2)
record(run_id=run.id, done_id=done.id)
watch(lambda: {
    "tab": board.selected_index,
    "monitored": board.monitor.run.id if board.monitor else None,
    "monitor_status": dict(board.monitor.surface.status) if board.monitor else {},
    "listed": [info.run_id for info in board.infos],
    **run_state(run),
})
board
"""


def test_the_dashboard_opens_a_run_and_approves_it_from_the_inbox_tab(
    voila, page, notebook
) -> None:
    notebook.write(ENGINE, DASHBOARD)
    voila.open(page, notebook, ".wfkit-dashboard .wfkit-dashboard-select select")
    state = notebook.wait_for(lambda s: s["status"] == "waiting", "the run waiting")
    run_id = state["run_id"]
    assert set(state["listed"]) == {run_id, state["done_id"]}
    expect(page.locator(".wfkit-dashboard-table tr.wfkit-run-row")).to_have_count(2)

    # filter the table to the waiting runs, then pick the run: its monitor tab opens
    page.locator(".wfkit-dashboard-status select").select_option("waiting")
    notebook.wait_for(lambda s: s["listed"] == [run_id], "only the waiting run listed")
    page.locator(".wfkit-dashboard-select select").select_option(
        label=f"{run_id} · refund v1 · waiting"
    )
    state = notebook.wait_for(
        lambda s: s["monitored"] == run_id and s["tab"] == 1, "the run's monitor opened"
    )
    monitor = page.locator(".wfkit-dashboard-monitor .wfkit-monitor-graph")
    expect(monitor).to_have_attribute("data-ready", "true")
    expect(monitor.locator("g.node[data-node-id='review']")).to_have_class(
        re.compile(r"\bwaiting\b")
    )

    # the Inbox tab: approve; the monitor (kernel side) sees the run complete
    page.locator(".wfkit-dashboard .lm-TabBar-tab", has_text="Inbox").click()
    notebook.wait_for(lambda s: s["tab"] == 2, "the inbox tab selected")
    approval = page.locator(f".wfkit-inbox-approval.wfkit-run-{css_token(run_id)}")
    approval.locator(".wfkit-inbox-approve").click()
    approval.locator(".wfkit-confirm-yes").click()
    state = notebook.wait_for(
        lambda s: s["status"] == "completed" and s["monitor_status"].get("review") == "succeeded",
        "the run completed and its monitor showing the review done",
    )
    assert event(state, "approval.approved", "review")["actor"] == "ana"
    assert state["data"]["shipped"] is True


# --- the inbox with no worker running ------------------------------------------------------------

NO_WORKERS = """
from wfkit.widgets import Inbox

registry.register("expense.submit", lambda ctx: None)
registry.register("expense.pay", lambda ctx: ctx.data.update(paid=True))
engine.register(
    wf.Workflow("expense", 1).start_with("expense.submit").approval("review").then("expense.pay")
)
run = engine.start("expense", {"amount": 40})
engine.run_until_idle()  # no workers: what the README's first example did
inbox = Inbox(engine, actor="ana", refresh_every=0.2)
record(run_id=run.id)


def snapshot():
    # explain first: once it says the run is ready, the status read after it agrees (reading the
    # status first could see "waiting" from just before the approval committed)
    explain = run.explain()
    return {**run_state(run), "workers": engine.workers_running, "explain": explain,
            "listed": sorted(key[0] for key in inbox.rows)}


watch(snapshot)
inbox
"""


def test_approving_with_no_worker_says_so_and_start_workers_finishes_the_run(
    voila, page, notebook
) -> None:
    notebook.write(ENGINE, NO_WORKERS)
    voila.open(page, notebook, ".wfkit-inbox .wfkit-inbox-approval")
    state = notebook.wait_for(lambda s: s["status"] == "waiting", "the run waiting")
    bar = page.locator(".wfkit-inbox .wfkit-workers")
    expect(bar).to_be_hidden()  # waiting for a person is not waiting for a worker

    row = page.locator(f".wfkit-inbox-approval.wfkit-run-{css_token(state['run_id'])}")
    row.locator(".wfkit-inbox-approve").click()
    row.locator(".wfkit-confirm-yes").click()

    state = notebook.wait_for(
        lambda s: "no worker is running" in s["explain"], "the run ready with nobody to run it"
    )
    assert state["status"] == "running" and state["workers"] is False
    expect(bar).to_be_visible()
    expect(bar.locator(".wfkit-workers-text")).to_contain_text(
        "ready: no worker is running in this kernel"
    )
    expect(page.locator(".wfkit-inbox-message")).to_contain_text("press Start workers")

    bar.locator(".wfkit-workers-start").click()
    state = notebook.wait_for(lambda s: s["status"] == "completed", "the run completed")
    assert state["workers"] is True and state["data"]["paid"] is True
    expect(bar).to_be_hidden()


LIVE = """
from wfkit.widgets import Inbox

registry.register("orders.prepare", lambda ctx: None)
engine.register(wf.Workflow("refund", 1).start_with("orders.prepare").approval("review"))
engine.start_workers(threads=1)
inbox = Inbox(engine, actor="ana", refresh_every=0.2)


def start_when_asked():
    gate = Path(TMP) / "start"
    while not gate.exists():
        if finished():
            return
        time.sleep(0.05)
    engine.start("refund", {"order": "o-9"})


threading.Thread(target=start_when_asked, daemon=True).start()
watch(lambda: {"listed": sorted(key[0] for key in inbox.rows)})
inbox
"""


def test_a_new_wait_appears_in_the_page_without_refresh(voila, page, notebook) -> None:
    notebook.write(ENGINE, LIVE)
    voila.open(page, notebook, ".wfkit-inbox .wfkit-inbox-summary")
    expect(page.locator(".wfkit-inbox-summary")).to_contain_text("nothing is waiting")
    # the test cannot start a run itself (the engine's file belongs to the kernel): a thread
    # there waits for this file and starts one
    (notebook.folder / "start").touch()
    expect(page.locator(".wfkit-inbox-approval")).to_have_count(1, timeout=30_000)
    expect(page.locator(".wfkit-inbox-summary")).to_contain_text("1 open: 1 approval")
