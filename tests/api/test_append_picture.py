"""``GET /runs/{id}/graph.svg`` draws a grown run's own graph (``engine.append``), not the
registered one."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import wfkit as wf
from tests.api.test_app import TOKEN, serving
from wfkit.api import create_app


def ids(svg: bytes) -> set[str]:
    return {e.get("id") or "" for e in ElementTree.fromstring(svg).iter()}


def test_the_graph_picture_of_a_grown_run_shows_the_appended_steps(tmp_path: Path) -> None:
    registry = wf.ActivityRegistry()
    for name in ("pic.first", "pic.appended"):
        registry.register(name, lambda ctx: None)
    engine = wf.Engine(tmp_path / "runs.duckdb", registry=registry)
    try:
        engine.register(wf.Workflow("pic", 1).start_with("pic.first").wait_for_signal("go"))
        grown, other = engine.start("pic", {}), engine.start("pic", {})
        engine.run_until_idle()
        engine.append(grown.id, lambda b: b.then("pic.appended"))
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with serving(create_app(engine, TOKEN)) as client:
            picture = client.get(f"/runs/{grown.id}/graph.svg", headers=auth)
            unchanged = client.get(f"/runs/{other.id}/graph.svg", headers=auth)
        assert picture.status_code == unchanged.status_code == 200, picture.text
        assert "node-pic.appended" in ids(picture.content)
        assert "node-pic.appended" not in ids(unchanged.content)
        assert "node-go" in ids(unchanged.content)
    finally:
        engine.close()
