"""The operator dashboard (`jobfsm dashboard`, or mounted in an application).

Needs the `web` extra. `fsm.dashboard.ports` (the JobBrowser store
capability) imports no web library; `create_app` imports Starlette when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..engine import Engine

__all__ = ["create_app"]


def create_app(engine: Engine, **options: Any) -> Starlette:
    """The dashboard ASGI app over `engine` (see `fsm.dashboard.app.create_app`)."""
    try:
        from .app import create_app as make
    except ImportError as err:
        raise MissingExtra(f"the dashboard (it needs {err.name})", "web") from err
    return make(engine, **options)
