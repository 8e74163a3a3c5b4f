"""Reading a Prometheus scrape in tests: every sample by name and labels, parsed with
prometheus_client's own text parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when the scrape has none)."""
    return found.get((name, frozenset(labels.items())), 0.0)
