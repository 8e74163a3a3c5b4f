"""Python-side tests of the widgets (a package: its module names repeat tests/engine's)."""
