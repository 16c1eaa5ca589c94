"""Typed payloads (docs/typed-payloads.md): a kind may declare its payload's type, an
attrs class or (with the `pydantic` extra) a pydantic model, in its `KindPolicy`.

`to_data` is submit's side: it validates a payload (an instance of the type, or a
mapping of its fields) and returns plain JSON data, which `fsm.jsonio` then encodes
and bounds as for every payload; a payload that does not fit raises `BadInput` naming
the field. `from_data` is the handler's side: the stored JSON data back into the type.
JSON crosses every boundary, never pickle; a process executor's child imports the type
by its path ("module:qualname"), as it imports the handler.

attrs classes go through cattrs (its JSON converter: datetimes, sets, nested classes),
made strict here: a field typed `str`, `int`, `float` or `bool` takes only a value of
that JSON type (no "5" for 5, no 1 for True), and keys that are not fields are refused.
pydantic models go through `model_validate` and `model_dump(mode="json")`: the model's
own configuration decides coercion and extra keys (`strict`, `extra="forbid"`).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import attrs

from .errors import BadInput

#: the payload's name in error texts (`field 'to'`), the root of cattrs' paths
_ROOT = "payload"
_AT = re.compile(r"^(?P<what>.*) @ payload(?P<path>.*)$")


def is_pydantic(tp: object) -> bool:
    """A pydantic model class (pydantic is imported by whoever defined one)."""
    module = sys.modules.get("pydantic")
    return module is not None and isinstance(tp, type) and issubclass(tp, module.BaseModel)


def type_path(tp: type) -> str:
    return f"{tp.__module__}:{tp.__qualname__}"


def import_named(path: str) -> Any:
    """The object "module:qualname" names (a handler, a payload type), imported; raises
    ImportError, AttributeError or ValueError when it cannot be, for the caller to name."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_type(path: str) -> type:
    """Import a payload type by "module:qualname" (BadInput naming it if it cannot be)."""
    try:
        obj = import_named(path)
    except (ImportError, AttributeError, ValueError) as err:
        raise BadInput(f"payload type {path!r} cannot be imported: {err}") from err
    if not isinstance(obj, type):
        raise BadInput(f"payload type {path!r} is not a class")
    return obj


def check_type(tp: object) -> type:
    """A payload type: an attrs class or a pydantic model, defined at a module's top
    level (a process executor's child imports it by its path). BadInput otherwise."""
    if not isinstance(tp, type) or not (attrs.has(tp) or is_pydantic(tp)):
        raise BadInput(
            f"payload_type must be an attrs class or a pydantic model (jobfsm[pydantic]); "
            f"got {tp!r:.80}"
        )
    path = type_path(tp)
    if "<locals>" in path:  # never importable; a module's top level is (in the child too)
        raise BadInput(
            f"payload_type {path!r} must be importable by module and name (define it at "
            "the top level of a module): a process executor's child imports it"
        )
    return tp


def _strict(tp: type, accepts: Callable[[Any], bool]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _type: Any) -> Any:
        if not accepts(value):
            raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
        return tp(value)

    return hook


@cache
def _converter() -> Any:
    """The process's cattrs converter (built on first use: cattrs is imported only by
    processes that declare an attrs payload type)."""
    from cattrs.preconf.json import make_converter

    converter = make_converter(forbid_extra_keys=True)

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    converter.register_structure_hook(str, _strict(str, lambda v: isinstance(v, str)))
    converter.register_structure_hook(
        int, _strict(int, lambda v: isinstance(v, int) and not isinstance(v, bool))
    )
    converter.register_structure_hook(float, _strict(float, number))
    converter.register_structure_hook(bool, _strict(bool, lambda v: isinstance(v, bool)))
    _strict_collections(converter)
    return converter


def _strict_collections(converter: Any) -> None:
    """A list, tuple or set field takes only a JSON array: cattrs itself iterates any
    iterable it is given, so `"ab"` would become `["a", "b"]` and `""` an empty list.

    The check wraps cattrs' own hook for the type, found by asking the same converter
    while this factory steps aside for that type (not cached), so that the items are
    still structured, strictly, by this converter."""
    from typing import get_origin

    from cattrs.cols import is_any_set, is_sequence

    building: set[Any] = set()

    def applies(tp: Any) -> bool:
        collection = is_sequence(tp) or is_any_set(tp) or get_origin(tp) is tuple
        return collection and tp not in building

    def factory(tp: Any) -> Callable[[Any, Any], Any]:
        building.add(tp)
        try:
            inner = converter.get_structure_hook(tp, cache_result=False)
        finally:
            building.discard(tp)

        def hook(value: Any, _type: Any) -> Any:
            if not isinstance(value, list | tuple):
                raise TypeError(f"expected a list, got {type(value).__name__}")
            return inner(value, _type)

        return hook

    converter.register_structure_hook_factory(applies, factory)


def _attrs_problems(err: Exception) -> list[str]:
    from cattrs import transform_error

    out = []
    for line in transform_error(err, path=_ROOT):
        m = _AT.match(line)
        if m is None or not m["path"]:
            out.append(line if m is None else m["what"])  # extra keys are named in it
        else:
            out.append(f"field {m['path'].lstrip('.')!r}: {m['what']}")
    return out


def _pydantic_problems(err: Any) -> list[str]:
    out = []
    for e in err.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"])
        out.append(f"field {where!r}: {e['msg']}" if where else e["msg"])
    return out


def _refuse(tp: type, what: str, problems: list[str]) -> BadInput:
    shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
    return BadInput(f"{what} does not fit {tp.__qualname__}: {shown}")


def from_data(tp: type, data: Any, what: str = _ROOT) -> Any:
    """JSON data (decoded) -> an instance of `tp`; BadInput naming the fields that do
    not fit."""
    if is_pydantic(tp):
        import pydantic

        try:
            return tp.model_validate(data)  # type: ignore[attr-defined]
        except pydantic.ValidationError as err:
            raise _refuse(tp, what, _pydantic_problems(err)) from None
    if not isinstance(data, Mapping):
        problem = f"it must be a {tp.__qualname__} or a mapping of its fields"
        raise _refuse(tp, what, [f"{problem}; got {type(data).__name__}"])
    from cattrs.errors import BaseValidationError

    try:
        return _converter().structure(data, tp)
    except BaseValidationError as err:
        raise _refuse(tp, what, _attrs_problems(err)) from None
    except (TypeError, ValueError) as err:  # a validator of the class itself
        raise _refuse(tp, what, [str(err)]) from None


def _as_is(value: Any) -> Any:
    """`value` as JSON data by the classes its values have, not the ones its fields
    declare (cattrs unstructures by the declared ones: a mapping where an attrs class
    is declared fails inside it, and text where a list is declared becomes a list of
    its characters). An attrs instance of the right types gives what cattrs gives."""
    if attrs.has(type(value)):
        return {f.alias: _as_is(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, list | tuple):
        return [_as_is(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _as_is(v) for k, v in value.items()}
    return _converter().unstructure(value)  # the leaves: text, numbers, dates


def to_data(tp: type, value: Any, what: str = _ROOT) -> Any:
    """A payload given to submit (an instance of `tp`, or a mapping of its fields) ->
    JSON data, validated; BadInput naming the fields that do not fit."""
    if is_pydantic(tp):
        data = value.model_dump() if isinstance(value, tp) else value  # type: ignore[attr-defined]
        return from_data(tp, data, what).model_dump(mode="json")
    if isinstance(value, tp):
        # attrs checks no types at construction: unstructured as its values are (by
        # their own classes, not as `tp` declares them: text in a list field stays
        # text, a mapping where a class belongs stays a mapping), then checked as
        # data, so a field that does not fit is named, never turned into one that does
        try:
            data = _as_is(value)
        except Exception as err:  # a value no JSON can hold (an object of no known class)
            raise _refuse(tp, what, [f"{type(err).__name__}: {err}"]) from err
        from_data(tp, data, what)
        return data
    return _converter().unstructure(from_data(tp, value, what), tp)
