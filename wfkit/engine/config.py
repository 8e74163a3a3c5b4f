"""``EngineConfig``: an engine's settings, read once from ``wf.Engine(db, **options)``.

The engine builds one frozen record from its keyword options (checked and parsed: durations are
``timedelta``, the artifact root is a URL) and hands it to the parts that need it, the writer
and the scheduler, at construction. Nothing sets a setting on a part after building it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from wfkit.definition.durations import parse_duration
from wfkit.definition.validation import DEFAULT_MAX_PAYLOAD
from wfkit.engine.artifacts import default_root, root_url
from wfkit.errors import UsageError

__all__ = ["DURABILITY", "EngineConfig"]

DURABILITY = ("step", "batched")
"""The values of ``durability``."""


@dataclass(frozen=True)
class EngineConfig:
    """The settings of one engine (see :class:`~wfkit.Engine` for what each option means)."""

    target: str = ":memory:"  # the DuckDB file, ":memory:" or a postgresql:// URL
    durability: str = "step"  # "step": durable before the next step; "batched": every few ms
    lease: timedelta = timedelta(seconds=30)  # shared stores: how long a run stays ours
    drain_timeout: timedelta = timedelta(seconds=60)  # how long a stopped attempt may take
    batch_size: int = 1024  # most steps one group commit takes
    max_payload: int = DEFAULT_MAX_PAYLOAD  # largest data document, in bytes of JSON
    artifacts: str | None = None  # the artifact root URL (None: none, for a bare writer)
    artifacts_shared: bool = False  # every run may load every artifact of this engine
    executor: Any = None  # a wf.DaskExecutor: the attempts it takes run on its cluster
    tracer_provider: Any = None  # where spans go (None: OpenTelemetry's global provider)

    @classmethod
    def of(
        cls,
        target: str | Path,
        *,
        durability: str = "step",
        lease: str | timedelta = "30s",
        drain_timeout: str | timedelta = "60s",
        batch_size: int = 1024,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        artifacts: str | Path | None = None,
        artifacts_shared: bool = False,
        executor: Any = None,
        tracer_provider: Any = None,
    ) -> EngineConfig:
        """The settings from ``wf.Engine``'s options, checked before anything is opened.

        Raises
        ------
        UsageError
            For a ``durability`` that is not one of :data:`DURABILITY`, or a duration it
            cannot read.
        """
        if durability not in DURABILITY:
            raise UsageError(
                f"durability must be one of {', '.join(map(repr, DURABILITY))}, not "
                f"{durability!r}: 'step' makes every checkpoint durable before the next step "
                "starts; 'batched' writes a running run's checkpoints every few milliseconds"
            )
        text = str(target)
        return cls(
            target=text,
            durability=durability,
            lease=parse_duration(lease),
            drain_timeout=parse_duration(drain_timeout),
            batch_size=batch_size,
            max_payload=max_payload,
            artifacts=default_root(text) if artifacts is None else root_url(artifacts),
            artifacts_shared=artifacts_shared,
            executor=executor,
            tracer_provider=tracer_provider,
        )
