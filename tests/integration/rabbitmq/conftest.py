"""Fixtures of the RabbitMQ integration tests (defined in helpers.py)."""

from __future__ import annotations

from .helpers import memory_engine, prefix, relay

__all__ = ["memory_engine", "prefix", "relay"]
