"""Shared fixtures (a fresh activity registry, so tests never depend on the global one) and the
test groups of pytest-xdist.

``make test`` and ``make check`` run the suite on one pytest-xdist worker per core with
``--dist loadgroup``: tests that share an expensive server they change run on one worker, in
one group each — every browser test (the Voila, JupyterLab and Notebook 7 servers and their
chromium), and every test on the session's Dask LocalCluster. Everything else is spread.
"""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf

THROWAWAY_ACTIVITIES = (
    "a",
    "b",
    "c",
    "d",
    "e",
    "pick",
    "undo.a",
    "undo.b",
    "binder",
)
"""Activity names the ``registry`` fixture registers (each a no-op)."""


def _noop(ctx: Any) -> None:
    return None


@pytest.fixture
def registry() -> wf.ActivityRegistry:
    """A fresh registry holding :data:`THROWAWAY_ACTIVITIES`, independent of the default one."""
    reg = wf.ActivityRegistry()
    for name in THROWAWAY_ACTIVITIES:
        reg.register(name, _noop)
    return reg


def _group(item: pytest.Item) -> str | None:
    """The xdist group of ``item``: tests sharing a server or a cluster run on one worker."""
    if item.get_closest_marker("browser") or "tests/browser/" in item.nodeid:
        return "browser"
    if "client" in getattr(item, "fixturenames", ()) and item.nodeid.startswith("tests/engine/"):
        return "dask"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group is not None and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


def _printable(text: str) -> str:
    """``text`` with lone surrogates escaped: pytest-xdist sends reports as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # tests of odd text (a lone surrogate in an activity's log line) capture it in their log
    # sections; a worker could not send such a report, and its whole run would stop
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _printable(content)) for title, content in report.sections]
