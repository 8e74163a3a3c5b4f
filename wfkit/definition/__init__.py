"""Definitions: pydantic node models, the builder DSL, the networkx graph, validation, pictures.

This layer imports neither the engine nor the store.
"""
