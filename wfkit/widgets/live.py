"""``Live``: a background thread that keeps a widget up to date, as the run monitor does.

A busy notebook cell processes no widget messages, so a widget that updates by itself does so
from a daemon thread; the thread stops on :meth:`Live.stop` (the widgets' ``close()`` calls it)
and waits for its current update, so nothing is left running behind a closed widget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from wfkit.errors import UsageError

__all__ = ["Live", "stop_live"]


class Live:
    """Call ``tick()`` every ``interval`` seconds on a daemon thread until :meth:`stop`.

    An exception from ``tick`` stops the thread and is handed to ``on_error`` (which says so in
    the widget); a ``tick`` that returns False ends it quietly (the run monitor, once its run
    ended); :meth:`start` starts it again. ``hint`` ends the error for a bad ``interval``.

    Examples
    --------
    >>> import time
    >>> ticks = []
    >>> live = Live(lambda: ticks.append(1), 0.01, "docs")
    >>> live.start(); time.sleep(0.2); live.stop()
    >>> live.running, len(ticks) > 0
    (False, True)
    """

    @classmethod
    def every(
        cls,
        seconds: float | None,
        tick: Callable[[], object],
        name: str,
        on_error: Callable[[Exception], None],
    ) -> Live | None:
        """The thread of a widget's ``refresh_every=seconds`` (not started), or None for
        ``refresh_every=None``; a bad interval raises :class:`~wfkit.errors.UsageError`."""
        return None if seconds is None else cls(tick, seconds, name, on_error)

    def __init__(
        self,
        tick: Callable[[], object],
        interval: float,
        name: str,
        on_error: Callable[[Exception], None] = lambda exc: None,
        *,
        hint: str = "e.g. refresh_every=1, or refresh_every=None to update only on Refresh",
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            raise UsageError(
                f"the {name} update interval must be a positive number of seconds, not "
                f"{interval!r}: {hint}"
            )
        self.tick = tick
        self.interval = interval
        self.name = name
        self.on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (a no-op while it runs)."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"wfkit-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for its current update to end."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.interval + 10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                going = self.tick()
            except Exception as exc:  # the engine closed, or a read failed: say so and stop
                self.on_error(exc)
                return
            if going is False:
                return


def stop_live(widget: object, built: str) -> bool:
    """Stop ``widget.live`` (its update thread, when it has one) and say whether its
    ``__init__`` got as far as the attribute ``built``: False when it was refused first (a bad
    ``refresh_every``), so that ``close()`` has nothing but the widget itself to close."""
    live = getattr(widget, "live", None)
    if live is not None:
        live.stop()
    return hasattr(widget, built)
