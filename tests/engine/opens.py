"""What this process opens and connects to while a block runs: an audit hook (``open``,
``socket.connect``) installed once, since ``sys.addaudithook`` cannot be removed, that notes
events only while :func:`watching` is active. Opens by relative name (``openat`` from a folder
descriptor) are noted by that name."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    """Paths opened and addresses connected to while watching."""

    opened: list[str] = field(default_factory=list)
    connected: list[str] = field(default_factory=list)


_lock = threading.Lock()
_current: Seen | None = None
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    seen = _current
    if seen is None:
        return
    if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
        seen.opened.append(os.fsdecode(args[0]))
    elif event == "socket.connect" and len(args) > 1:
        seen.connected.append(repr(args[1]))


@contextmanager
def watching() -> Iterator[Seen]:
    """Note every open and connect of this process (any thread) until the block ends."""
    global _current, _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
        seen = Seen()
        _current = seen
    try:
        yield seen
    finally:
        _current = None
