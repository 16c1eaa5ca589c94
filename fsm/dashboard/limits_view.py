"""The limits page: every global limit (docs/flow-control.md) with the jobs holding a
slot and waiting now, who set it, when and why, the newest changes; and the forms that
set, change and clear one.

A change goes through the service's own operations (`fsm.service.limits.set_limit`
and `clear_limit`, those of `jobfsm limits set/clear`) as the logged-in operator,
after `Actions.checked_action` (origin, read-only, operator, capped form, CSRF). The
form's numbers reach `fsm.lifecycle.limits.checked` as typed (a whole number as an
int, a period as a float, anything else as the text itself), so a bad value is
refused with its `BadInput`, naming it, and nothing is stored.

Bounded: the store's limits are read in one query, but the jobs holding a slot and
waiting are counted for the first LIMITS_SHOWN keys only (two counts a key), and the
newest CHANGES_SHOWN changes are read.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..errors import BadInput, JobFSMError
from ..lifecycle.limits import MIN_PERIOD, Limit, parse_key
from ..service import limits as flow
from ..service.kernel import Kernel
from . import security
from .actions import Actions, Pages, refused

#: limits listed (by key) with their counts; past it the page says how many more exist
LIMITS_SHOWN = 100
#: audited changes listed under the limits
CHANGES_SHOWN = 20
#: what a limit form may do, and what its redirect says was done
LIMIT_ACTIONS = {"set": "set", "clear": "cleared"}
#: the set form's fields, kept when the form comes back with an error
FORM_FIELDS = ("key", "concurrency", "rate", "period", "new_kind", "reason")
#: longest number text read as a number (a longer one is passed on as text, and refused)
NUMBER_CHARS = 40
_WHOLE = re.compile(r"[+-]?[0-9]{1,30}")


def limit_map(kernel: Kernel) -> dict[str, Limit]:
    """The store's limits by key ({} for a store that keeps none): the badges' source."""
    try:
        return flow.limiting(kernel).limits()
    except BadInput:
        return {}


def bounded_statuses(kernel: Kernel, most: int) -> tuple[list[flow.LimitStatus], int]:
    """`flow.limit_statuses` for the first `most` keys only, and how many limits exist.
    BadInput for a store that keeps no limits."""
    store = flow.limiting(kernel)
    limits = store.limits()
    shown = sorted(limits)[:most]
    usage = store.limit_usage(shown, kernel.heartbeat_states, kernel.lease_states)
    return [flow.LimitStatus(limits[k], *usage.get(k, (0, 0))) for k in shown], len(limits)


def number(text: str, *, whole: bool) -> object:
    """A form field as `checked` should see it: None when empty, an int (or, for a
    period, a float) when it reads as one, else the text itself (which `checked`
    refuses, naming it)."""
    text = text.strip()
    if not text:
        return None
    if _WHOLE.fullmatch(text):
        return int(text)
    if not whole and len(text) <= NUMBER_CHARS:
        try:
            return float(text)
        except ValueError:
            pass
    return text


def form_values(form: dict[str, list[str]]) -> dict[str, str]:
    return {k: ((form.get(k) or [""])[0]).strip()[:1000] for k in FORM_FIELDS}


def blank_form(edit: Limit | None = None) -> dict[str, str]:
    """The set form's values: empty, or those of the limit being changed."""
    values = dict.fromkeys(FORM_FIELDS, "")
    if edit is not None:
        values["key"] = edit.key
        values["concurrency"] = "" if edit.concurrency is None else str(edit.concurrency)
        values["rate"] = "" if edit.rate is None else str(edit.rate)
        values["period"] = "" if edit.period is None else f"{edit.period:g}"
    return values


class Limits:
    """The handlers of the limits page over one dashboard."""

    def __init__(self, pages: Pages, actions: Actions) -> None:
        self.d = pages
        self.a = actions

    def routes(self) -> list[Route]:
        return [
            Route("/limits", self.page, name="limits"),
            Route("/limits/act", self.act, methods=["POST"], name="limit_act"),
        ]

    def context(self, edit: str | None = None) -> dict[str, Any]:
        kernel = self.d.engine.kernel
        context: dict[str, Any] = {
            "statuses": [],
            "total": 0,
            "changes": [],
            "unsupported": None,
            "shown_most": LIMITS_SHOWN,
            "changes_most": CHANGES_SHOWN,
            "min_period": f"{MIN_PERIOD:g}",
            "held_states": kernel.heartbeat_states,
            "waiting_states": kernel.lease_states,
            "form": blank_form(),
            "done": None,
            "done_key": "",
            "error": None,
        }
        try:
            context["statuses"], context["total"] = bounded_statuses(kernel, LIMITS_SHOWN)
            context["changes"] = flow.limit_changes(kernel, None, CHANGES_SHOWN)
        except BadInput as err:  # a store that keeps no limits
            context["unsupported"] = str(err)
            return context
        current = {s.limit.key: s.limit for s in context["statuses"]}
        if edit in current:
            context["form"] = blank_form(current[edit])
        return context

    async def page(self, request: Request) -> Response:
        edit = request.query_params.get("edit")
        context = await run_in_threadpool(self.context, edit)
        done = request.query_params.get("done")
        context["done"] = done if done in LIMIT_ACTIONS.values() else None
        context["done_key"] = request.query_params.get("key", "")[:300]
        return self.d.page(request, "limits", context)

    def change(self, action: str, actor: str, values: dict[str, str]) -> None:
        """Carry out one limit action through the service; BadInput names a bad field."""
        kernel = self.d.engine.kernel
        key = values["key"]
        parse_key(key)
        reason = security.reason_field(values["reason"])
        if action == "clear":
            flow.clear_limit(kernel, key, actor=actor, reason=reason)
            return
        flow.set_limit(
            kernel,
            key,
            concurrency=number(values["concurrency"], whole=True),
            rate=number(values["rate"], whole=True),
            period=number(values["period"], whole=False),
            actor=actor,
            reason=reason,
            new_kind=values["new_kind"] == "1",
        )

    async def act(self, request: Request) -> Response:
        try:
            actor, form = await self.a.checked_action(request)
        except security.Refused as err:
            return refused(err)
        action = (form.get("action") or [""])[0]
        values = form_values(form)
        try:
            if action not in LIMIT_ACTIONS:
                raise BadInput(f"unknown limit action {action[:40]!r}")
            await run_in_threadpool(self.change, action, actor, values)
        except JobFSMError as err:
            context = await run_in_threadpool(self.context)
            if action == "set":
                context["form"] = values
            context["error"] = str(err)
            return self.d.page(request, "limits", context, 400)
        target = request.url_for("limits").include_query_params(
            done=LIMIT_ACTIONS[action], key=values["key"]
        )
        return RedirectResponse(str(target), status_code=303)
