"""The operator dashboard (`jobfsm dashboard`, or mounted in an application).

Needs `pip install 'jobfsm[web]'`. `fsm.dashboard.ports` (the JobBrowser store
capability) imports no web library; `create_app` imports Starlette when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..engine import Engine

__all__ = ["create_app"]


def create_app(engine: Engine, **options: Any) -> Starlette:
    """The dashboard ASGI app over `engine` (see `fsm.dashboard.app.create_app`)."""
    try:
        from .app import create_app as make
    except ImportError as err:
        from ..telemetry.prometheus import MissingExtra

        raise MissingExtra(f"the dashboard needs {err.name}: pip install 'jobfsm[web]'") from err
    return make(engine, **options)
