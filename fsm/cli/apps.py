"""`--app MODULE[:OBJ]`: an application's handlers, imported by name (`jobfsm worker`,
which runs them, and `jobfsm submit`, which checks a payload by its kind's declaration)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import BadInput
from ..inputs import KindPolicy
from ..worker.handlers import HandlerSpec

#: the object `--app module` names when no `:obj` is given
DEFAULT_APP_OBJECT = "handlers"


def load_app(ref: str) -> Mapping[str, Any]:
    """Import "module[:obj]" (obj defaults to `handlers`), a mapping of kind -> handler
    (e.g. `fsm.worker.handlers.Handlers`) or a factory returning one.

    The current directory is importable, as with celery and dramatiq: `jobfsm worker
    --app mysvc.jobs` finds ./mysvc/jobs.py."""
    module_name, sep, attr = ref.partition(":")
    if not sep:
        attr = DEFAULT_APP_OBJECT
    if not module_name or not attr:
        raise BadInput(f"--app must look like 'package.module[:obj]', got {ref!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            raise BadInput(
                f"--app {ref!r}: cannot import {module_name!r} ({err}); modules are imported "
                f"from the current directory ({cwd}) and the installed packages: run the "
                "command from your project's root, or install your package"
            ) from err
        raise BadInput(f"--app {ref!r}: importing {module_name!r} failed: {err}") from err
    except Exception as err:  # the app's own import-time error: name it, one line
        raise BadInput(
            f"--app {ref!r}: importing {module_name!r} failed: {type(err).__name__}: {err}"
        ) from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            hint = "" if sep else f" (with no ':obj', --app means '{module_name}:{attr}')"
            raise BadInput(f"--app {ref!r}: {module_name!r} has no {attr!r}{hint}") from err
    if callable(obj) and not isinstance(obj, Mapping):
        try:
            obj = obj()  # a factory returning the handlers
        except TypeError as err:
            raise BadInput(
                f"--app {ref!r} is not a mapping of kind -> handler, nor a factory "
                f"taking no arguments that returns one ({err})"
            ) from err
    if not isinstance(obj, Mapping):
        raise BadInput(f"--app {ref!r} is not a mapping of kind -> handler (got {type(obj)})")
    return obj


def kind_policy(ref: str, kind: str) -> KindPolicy | None:
    """The policy the handler of `kind` declares in the app `ref` (its queue, attempts,
    payload type...), None for a plain callable; BadInput if the app has no handler for
    `kind` (a submit for it would wait for a worker that never comes from this app)."""
    handlers = load_app(ref)
    if kind not in handlers:
        known = ", ".join(sorted(map(str, handlers))[:20]) or "none"
        raise BadInput(f"--app {ref!r} has no handler for kind {kind!r:.80} (its kinds: {known})")
    spec = handlers[kind]
    return spec.policy if isinstance(spec, HandlerSpec) else None
