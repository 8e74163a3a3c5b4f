"""Attribute keys of the workflow graph, in one place.

A workflow graph is a plain ``networkx.MultiDiGraph``: node attributes, edge attributes and graph
attributes are JSON-friendly values stored under these keys. Edge *keys* are outlet names.
"""

from __future__ import annotations

# node attributes
KIND = "kind"
ACTIVITY = "activity"
CONFIG = "config"
POLICY = "policy"
LABEL = "label"
SAGA = "saga"
COMPENSATION = "compensation"
COMPENSATION_POLICY = "compensation_policy"

NODE_KEYS = (KIND, ACTIVITY, CONFIG, POLICY, LABEL, SAGA, COMPENSATION, COMPENSATION_POLICY)

# edge attributes (the edge key itself is the outlet name)
EDGE_LABEL = "label"

# graph attributes
SAGAS = "sagas"
STRICT_MERGES = "strict_merges"
RUN_RETRY = "run_retry"
