"""The harness itself: a click in chromium reaches the kernel, and the kernel's state file shows
it; a kernel-side exception in a click handler is caught rather than lost."""

from __future__ import annotations

import sys

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_click_in_the_page_changes_the_kernel_state(voila, page, notebook) -> None:
    notebook.write(
        """
        import ipywidgets as W

        clicks = W.IntText(0)
        button = W.Button(description="Count")
        button.add_class("harness-count")

        def count(_):
            clicks.value += 1
            record(clicks=clicks.value)

        button.on_click(count)
        record(phase="ready", clicks=0)
        W.VBox([button, clicks])
        """
    )
    voila.open(page, notebook, ".harness-count")
    state = notebook.wait_for(lambda s: s["phase"] == "ready", "the widget built")
    assert state["python"] == sys.executable  # the kernel runs this venv, so imports this wfkit
    page.locator(".harness-count").click()
    page.locator(".harness-count").click()
    assert notebook.wait_for(lambda s: s["clicks"] == 2, "two clicks")["clicks"] == 2


def test_a_raising_click_handler_is_recorded_not_lost(voila, page, notebook) -> None:
    notebook.write(
        """
        import ipywidgets as W

        button = W.Button(description="Boom")
        button.add_class("harness-boom")
        button.on_click(lambda _: 1 / 0)
        record(phase="ready")
        button
        """
    )
    voila.open(page, notebook, ".harness-boom")
    page.locator(".harness-boom").click()
    with pytest.raises(pytest.fail.Exception, match="ZeroDivisionError"):
        notebook.wait_for(lambda s: False, "nothing", timeout=10)
    notebook.state_path.unlink()  # the exception was expected: do not fail the test for it
