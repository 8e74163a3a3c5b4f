"""A run displayed in a notebook: its graph with each node reached coloured by its status."""

from __future__ import annotations

import re
from html import escape

import wfkit as wf

from .conftest import Activities


def test_a_run_displays_its_graph_with_node_status_and_where_it_stands(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.noop("orders.check", "mail.send")
    acts.add("card.charge", lambda ctx: 1 / 0)
    flow = (
        wf.Workflow("orders", 1)
        .start_with("orders.check")
        .then("card.charge", max_attempts=1)
        .then("mail.send")
    )
    engine.register(flow)
    run = engine.start("orders", {})
    engine.run_until_idle()

    bundle = run._repr_mimebundle_()

    assert bundle["text/plain"] == repr(run)
    html = bundle["text/html"]
    assert re.search(r'class="node succeeded"', html)  # orders.check
    assert re.search(r'class="node failed"', html)  # card.charge
    assert f"orders v1 — run {run.id}" in html
    assert re.search(r'class="node skipped">\s*<title>n3<', html)  # mail.send: never reached
    assert escape(run.explain()) in html and run.status is wf.RunStatus.FAILED
    assert 'style="max-width: 100%; height: auto"' in html
