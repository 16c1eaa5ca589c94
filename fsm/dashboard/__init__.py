"""The operator dashboard (`jobfsm dashboard`, or mounted in an application).

Needs the `web` extra; `create_app` imports Starlette when called. What the
dashboard reads beyond the Store port is the store's `JobBrowser` capability
(`fsm.ports`, beside the other optional capabilities).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra
from .auth import Authenticator, app_user, new_token

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..service.engine import Engine

__all__ = ["Authenticator", "app_user", "create_app", "new_token"]


def create_app(engine: Engine, **options: Any) -> Starlette:
    """The dashboard ASGI app over `engine` (see `fsm.dashboard.app.create_app`)."""
    try:
        from .app import create_app as make
    except ImportError as err:
        raise MissingExtra(f"the dashboard (it needs {err.name})", "web") from err
    return make(engine, **options)
