"""Inbox: approve/reject with a comment, send a signal whose payload is checked against the
wait's model before anything is sent; every action is recorded with the actor field."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from ipywidgets import HTML
from pydantic import BaseModel, Field

import wfkit as wf
from tests.polling import wait_until
from wfkit.widgets import Inbox
from wfkit.widgets.workers import NO_WORKER


class Payment(BaseModel):
    """The payload model of the ``paid`` wait."""

    amount: int = Field(gt=0)
    ref: str


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def texts(widget: Any) -> str:
    """Every HTML text shown inside ``widget``."""
    own = widget.value if isinstance(widget, HTML) else ""
    return own + "".join(texts(child) for child in getattr(widget, "children", ()))


@pytest.fixture
def review(engine: wf.Engine, acts: Any) -> wf.Run:
    """A run parked on the approval 'review' (rejected -> notify)."""
    acts.noop("prepare", "publish", "notify")
    engine.register(
        wf.Workflow("review")
        .start_with("prepare")
        .approval("review", assignees=["finance"], on_reject=lambda b: b.then("notify").end())
        .then("publish")
    )
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()
    return run


@pytest.fixture
def paid(engine: wf.Engine, acts: Any) -> wf.Run:
    """A run parked on signal 'paid' (key o-1) whose payload must fit ``Payment``."""
    acts.noop("invoice", "ship")
    engine.register(
        wf.Workflow("pay")
        .start_with("invoice")
        .wait_for_signal("paid", correlate="order_id", bind={"amount": "amount"}, payload=Payment)
        .then("ship")
    )
    run = engine.start("pay", {"order_id": "o-1"})
    engine.run_until_idle()
    return run


def test_the_inbox_lists_every_open_wait_and_approval(engine, review, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)

    assert inbox.summary.value == "2 open: 1 approval, 1 signal wait"
    approval = inbox.row(review.id, "review")
    signal = inbox.row(paid.id, "paid")
    assert set(approval.buttons) == {"approve", "reject"}
    assert set(signal.buttons) == {"send"}
    assert "wfkit-inbox-approval" in approval._dom_classes
    assert f"wfkit-run-{review.id}" in approval._dom_classes
    assert "finance" in texts(approval)
    assert "Payment" in texts(signal)
    assert signal.payload.placeholder == '{"amount": <integer>, "ref": <string>}'


def test_approving_with_a_comment_records_actor_and_comment_and_the_run_goes_on(
    engine, acts, review
) -> None:
    inbox = Inbox(engine, refresh_every=None)
    inbox.actor.value = "ana"
    row = inbox.row(review.id, "review")
    row.comment.value = "looks right"

    row.buttons["approve"].click()
    assert events(review, "approval.approved") == []  # asking is not acting
    row.confirm.yes_button.click()

    approved = events(review, "approval.approved")
    assert [(e.node_id, e.actor, e.output["comment"]) for e in approved] == [
        ("review", "ana", "looks right")
    ]
    assert engine.waiting() == []
    assert inbox.rows == {}  # the list was read again
    assert inbox.message.kind == "ok" and "ana" in inbox.message.text
    engine.run_until_idle()
    assert review.status == wf.RunStatus.COMPLETED
    assert acts.calls[-1] == "publish"


def test_rejecting_takes_the_rejected_outlet(engine, acts, review) -> None:
    inbox = Inbox(engine, actor="bo", refresh_every=None)
    row = inbox.row(review.id, "review")
    row.comment.value = "numbers are off"

    row.buttons["reject"].click()
    assert row.confirm.pending == f"Really reject review of run {review.id}?"
    row.confirm.yes_button.click()
    engine.run_until_idle()

    assert review.outputs["review"]["approved"] is False
    assert review.outputs["review"]["comment"] == "numbers are off"
    assert events(review, "approval.rejected")[0].actor == "bo"
    assert acts.calls[-1] == "notify"


def test_the_actor_defaults_to_the_os_user(engine, review, monkeypatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "os-user")
    inbox = Inbox(engine, refresh_every=None)
    assert inbox.actor.value == "os-user"

    row = inbox.row(review.id, "review")
    row.buttons["approve"].click()
    row.confirm.yes_button.click()

    assert events(review, "approval.approved")[0].actor == "os-user"


def test_without_an_actor_nothing_is_decided(engine, review) -> None:
    inbox = Inbox(engine, actor="", refresh_every=None)
    row = inbox.row(review.id, "review")

    row.buttons["approve"].click()

    assert row.error.kind == "error" and "actor" in row.error.text
    assert [w.node_id for w in engine.waiting()] == ["review"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"amount": -5}', "does not fit Payment"),
        ('{"amount": "lots", "ref": "tx"}', "amount"),
        *(('{"a":' * n + "1" + "}" * n, "nested deeper than 64 levels") for n in (65, 1_000)),
        ('{"a":' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 64 levels"),
    ],
)
def test_a_bad_payload_shows_the_error_and_sends_nothing(engine, paid, text, says) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    before = len(paid.history())
    row.payload.value = text

    row.buttons["send"].click()

    assert row.error.kind == "error"
    assert says in row.error.text and "nothing was sent" in row.error.text
    assert inbox.message.kind == "error"
    assert [(w.run_id, w.node_id) for w in engine.waiting()] == [(paid.id, "paid")]
    assert len(paid.history()) == before  # not even a refused-signal event
    assert inbox.row(paid.id, "paid") is row  # the row stays, with what was typed
    assert row.payload.value == text


def test_a_missing_required_field_is_named(engine, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    row.payload.value = '{"amount": 5}'

    row.buttons["send"].click()

    assert "ref: Field required" in row.error.text
    assert paid.status == wf.RunStatus.WAITING


def test_sending_a_fitting_payload_resumes_the_run(engine, acts, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    row.payload.value = '{"amount": "25", "ref": "tx-1"}'

    row.buttons["send"].click()
    assert events(paid, "signal.received") == []
    row.confirm.yes_button.click()
    engine.run_until_idle()

    received = events(paid, "signal.received")
    assert [(e.node_id, e.actor) for e in received] == [("paid", "ana")]
    assert paid.status == wf.RunStatus.COMPLETED
    assert paid.data == {"order_id": "o-1", "amount": 25}
    assert acts.calls == ["invoice", "ship"]
    assert inbox.message.kind == "ok" and "paid" in inbox.message.text
    assert inbox.summary.value == "nothing is waiting"


def test_refresh_picks_up_new_waits_and_keeps_typed_text(engine, acts, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    row.payload.value = '{"amount": 1'  # half typed
    second = engine.start("pay", {"order_id": "o-2"})
    engine.run_until_idle()

    inbox.refresh_button.click()

    assert inbox.row(paid.id, "paid") is row
    assert row.payload.value == '{"amount": 1'
    assert inbox.row(second.id, "paid").wait.key == "o-2"
    assert inbox.summary.value == "2 open: 0 approvals, 2 signal waits"


def test_a_wait_closed_elsewhere_reports_nothing_sent(engine, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    engine.signal("paid", "o-1", {"amount": 3, "ref": "by-api"}, actor="api")
    row.payload.value = '{"amount": 25, "ref": "tx-1"}'

    row.buttons["send"].click()
    row.confirm.yes_button.click()

    assert inbox.message.kind == "error"
    assert "nothing was sent" in inbox.message.text
    assert [e.actor for e in events(paid, "signal.received")] == ["api"]
    assert inbox.rows == {}


# --- every button asks first ------------------------------------------------------------------


def test_approve_asks_first_and_no_changes_nothing(engine, review) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(review.id, "review")
    row.comment.value = "fine by me"
    before = len(review.history())

    row.buttons["approve"].click()

    assert row.confirm.pending == f"Really approve review of run {review.id}?"
    assert inbox.pending == row.confirm.pending
    assert row.confirm.layout.display == "flex"
    assert row.confirm.detail == 'Comment: "fine by me". Recorded as approved by ana.'
    assert len(review.history()) == before  # asking is not acting
    assert [w.node_id for w in engine.waiting()] == ["review"]

    row.confirm.no_button.click()

    assert row.confirm.pending is None and row.confirm.layout.display == "none"
    assert len(review.history()) == before
    assert review.status == wf.RunStatus.WAITING
    assert inbox.row(review.id, "review") is row


def test_yes_records_what_the_question_showed(engine, review) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(review.id, "review")
    row.comment.value = "as asked"
    row.buttons["reject"].click()
    row.comment.value = "typed after the question"  # not what was confirmed
    inbox.actor.value = "someone else"

    row.confirm.yes_button.click()

    (rejected,) = events(review, "approval.rejected")
    assert (rejected.actor, rejected.output["comment"]) == ("ana", "as asked")


def test_send_asks_first_with_the_payload_and_a_bad_payload_asks_nothing(engine, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    row = inbox.row(paid.id, "paid")
    row.payload.value = '{"amount": -1, "ref": "x"}'

    row.buttons["send"].click()

    assert row.confirm.pending is None  # refused before any question
    assert "does not fit Payment" in row.error.text

    row.payload.value = '{"amount": 7, "ref": "tx-7"}'
    row.buttons["send"].click()

    assert row.confirm.pending == f"Really send signal 'paid' (key o-1) to run {paid.id}?"
    assert row.confirm.detail == ('Payload: {"amount": 7, "ref": "tx-7"}. Recorded as sent by ana.')
    assert events(paid, "signal.received") == []
    row.confirm.yes_button.click()
    engine.run_until_idle()
    assert paid.status == wf.RunStatus.COMPLETED and paid.data["amount"] == 7


def test_one_question_at_a_time(engine, review, paid) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    approval, signal = inbox.row(review.id, "review"), inbox.row(paid.id, "paid")
    approval.buttons["approve"].click()
    signal.payload.value = '{"amount": 1, "ref": "r"}'

    signal.buttons["send"].click()

    assert approval.confirm.pending is None
    assert signal.confirm.pending is not None
    assert review.status == paid.status == wf.RunStatus.WAITING


# --- live updates and the workers bar ---------------------------------------------------------


def wfkit_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_new_waits_appear_and_closed_ones_go_without_refresh(engine, review) -> None:
    engine.start_workers(threads=1)
    inbox = Inbox(engine, actor="ana", refresh_every=0.05)
    assert inbox.live is not None and inbox.live.running
    row = inbox.row(review.id, "review")
    row.comment.value = "half typed"

    second = engine.start("review", {"doc": 2})

    wait_until(lambda: (second.id, "review", "approval", ()) in inbox.rows, "the new wait listed")
    assert inbox.summary.value == "2 open: 2 approvals, 0 signal waits"
    assert inbox.row(review.id, "review") is row and row.comment.value == "half typed"

    engine.approve(second.id, "review", True, actor="api")  # decided elsewhere

    wait_until(lambda: len(inbox.rows) == 1, "the decided wait gone")
    assert second.result(timeout=30) == {"doc": 2}

    inbox.close()
    assert not inbox.live.running
    assert wfkit_threads("wfkit-inbox") == []


def test_approving_with_no_worker_says_so_and_start_workers_moves_the_run_on(
    engine, acts, review
) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    assert inbox.workers.layout.display == "none"  # the run waits for a person, not a worker
    row = inbox.row(review.id, "review")

    row.buttons["approve"].click()
    row.confirm.yes_button.click()

    assert review.status == wf.RunStatus.RUNNING
    assert NO_WORKER in inbox.message.text and "Start workers" in inbox.message.text
    assert inbox.workers.layout.display == "flex" and NO_WORKER in inbox.workers.text.value
    assert "no worker is running" in review.explain()
    assert acts.calls == ["prepare"]

    inbox.workers.start_button.click()

    assert engine.workers_running
    assert review.result(timeout=30) == {"doc": 1}
    assert acts.calls == ["prepare", "publish"]
    inbox.refresh()
    assert inbox.workers.layout.display == "none"


def test_a_question_whose_wait_closes_elsewhere_goes_and_says_nothing_was_done(
    engine, review
) -> None:
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    inbox.row(review.id, "review").buttons["approve"].click()
    engine.approve(review.id, "review", False, actor="api")

    inbox.refresh()

    assert inbox.rows == {} and inbox.pending is None
    assert inbox.message.kind == "error"
    assert inbox.message.text == (
        f"review of run {review.id} is no longer waiting (closed elsewhere); nothing was done"
    )
    assert [e.actor for e in events(review, "approval.rejected")] == ["api"]


def test_with_engine_workers_an_approval_finishes_the_run_and_shows_no_bar(tmp_path, acts) -> None:
    acts.noop("prepare", "publish")
    engine = wf.Engine(tmp_path / "w.duckdb", registry=acts.registry, workers=2)
    try:
        engine.register(
            wf.Workflow("review").start_with("prepare").approval("review").then("publish")
        )
        run = engine.start("review", {})
        engine.run_until_idle()
        inbox = Inbox(engine, actor="ana", refresh_every=None)
        row = inbox.row(run.id, "review")
        row.buttons["approve"].click()
        row.confirm.yes_button.click()

        assert run.result(timeout=30) == {}
        assert NO_WORKER not in inbox.message.text
        assert inbox.workers.layout.display == "none"
        inbox.close()
    finally:
        engine.close()


@pytest.mark.parametrize("bad", [0, -1, "1s", True])
def test_a_bad_update_interval_is_refused_before_anything_is_shown(engine, bad) -> None:
    with pytest.raises(wf.UsageError, match="inbox update interval must be a positive number"):
        Inbox(engine, actor="ana", refresh_every=bad)
    assert wfkit_threads("wfkit-inbox") == []


def test_a_for_each_of_approvals_shows_one_row_per_item_and_decides_that_item(engine, acts) -> None:
    published: list[str] = []
    acts.noop("prepare", "done")
    acts.add("publish", lambda ctx: published.append(ctx.item))
    engine.register(
        wf.Workflow("batch")
        .start_with("prepare")
        .for_each("items", lambda b: b.approval("review").then("publish"))
        .then("done")
    )
    run = engine.start("batch", {"items": ["a", "b", "c"]})
    engine.run_until_idle()
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    assert inbox.summary.value == "3 open: 3 approvals, 0 signal waits"
    row = inbox.row(run.id, "review", loop_path=[1])
    assert "wfkit-item-1" in row._dom_classes
    assert "approval review (item 1)" in texts(row)

    row.comment.value = "b only"
    row.buttons["approve"].click()
    assert "review (item 1)" in row.confirm.pending
    row.confirm.yes_button.click()
    engine.run_until_idle()
    assert published == ["b"]
    assert sorted(path for (_r, _n, _k, path) in inbox.rows) == [(0,), (2,)]
    assert "review (item 1)" in inbox.message.text
    with pytest.raises(KeyError, match=r"for item \[1\]"):
        inbox.row(run.id, "review", loop_path=[1])


def test_send_says_when_an_older_wait_listens_for_the_same_signal(engine, paid) -> None:
    first = paid
    second = engine.start("pay", {"order_id": "o-1"})
    engine.run_until_idle()
    inbox = Inbox(engine, actor="ana", refresh_every=None)
    younger = next(r for r in inbox.rows.values() if r.wait.run_id == second.id)
    younger.payload.value = '{"amount": 5, "ref": "r"}'
    younger.buttons["send"].click()
    assert f"it goes to the oldest, paid of run {first.id}" in texts(younger.confirm)

    older = inbox.row(first.id, "paid")
    older.payload.value = '{"amount": 5, "ref": "r"}'
    older.buttons["send"].click()
    assert "goes to the oldest" not in texts(older.confirm)
