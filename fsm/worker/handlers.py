"""Handler registration: a kind, its function and the kind's policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from ..errors import BadInput
from ..handling.attempt import Handler, handler_path, is_async, typed_path
from ..inputs import KindPolicy, check_name
from ..lifecycle.limits import Limit, checked
from ..service.reconcile import DEFAULT_RECONCILE_TIMEOUT, Reconcile, Reconciler
from ..service.schedules import Schedule, schedule
from .hooks import Hook, Hooks, check_hook


@attrs.frozen
class HandlerSpec:
    """One registered handler: `target` names it for executors in other processes."""

    kind: str
    fn: Handler = attrs.field(repr=False)
    target: str
    policy: KindPolicy
    #: an `async def` handler: an executor with an event loop runs it (`adapters.asyncio_executor`)
    asynchronous: bool = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda self: is_async(self.fn), takes_self=True),
    )
    #: asked by the recovery sweep about a lost run of this kind (`fsm.service.reconcile`)
    reconciler: Reconciler | None = attrs.field(kw_only=True, default=None)
    #: the kind's global limit declared in code (`register(..., concurrency_limit=,
    #: rate_limit=)`): a worker stores it at start unless an operator set one
    #: (`fsm.service.limits.declare`, docs/flow-control.md)
    limit: Limit | None = attrs.field(kw_only=True, default=None)


class Handlers(Mapping[str, HandlerSpec]):
    """A registry of handlers by kind, usable before any engine exists (`--app mod:obj`).

    handlers = Handlers()

    @handlers.handler("email.send", retry_safe=False, timeout=30)
    def send(ctx): ...

    @handlers.handler("http.fetch")
    async def fetch(ctx): ...   # runs on the worker's event loop (docs/asyncio.md)

    @handlers.periodic("*/5 * * * *", timezone="Europe/Berlin")  # docs/schedules.md
    @handlers.handler("report.refresh")
    def refresh(ctx): ...

    @handlers.child_init    # once in each process that runs handlers (fsm.worker.hooks)
    def warm(): ...
    """

    def __init__(self, items: Mapping[str, Handler | HandlerSpec] | None = None) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        self._schedules: dict[str, Schedule] = {}
        self._hooks = Hooks()
        for kind, fn in (items or {}).items():
            if isinstance(fn, HandlerSpec):
                self.add(fn)
            else:
                self.register(kind, fn)

    def add(self, spec: HandlerSpec) -> HandlerSpec:
        """Add an already built handler spec (from another registry)."""
        self._specs[check_name("kind", spec.kind)] = spec
        return spec

    def queues(self) -> tuple[str, ...]:
        """The queues the registered kinds submit to by default, in registration order."""
        return tuple(dict.fromkeys(spec.policy.queue for spec in self._specs.values()))

    def register(
        self,
        kind: str,
        fn: Handler,
        *,
        retry_safe: bool = True,
        timeout: float | None = None,
        max_attempts: int | None = None,
        queue: str = "default",
        priority: int = 0,
        deadline_after: float | None = None,
        max_recoveries: int | None = None,
        marks_outside_calls: bool = False,
        reconcile: Reconcile | None = None,
        reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT,
        final_check: bool = False,
        concurrency_limit: int | None = None,
        rate_limit: tuple[int, float] | None = None,
        payload_type: type | None = None,
    ) -> HandlerSpec:
        """Register `fn` for `kind` with the kind's policy (`fsm.inputs.KindPolicy`).

        `marks_outside_calls=True`: the handler calls `ctx.mark(...)` before every
        outside call, so a lost run without marks is re-run. `reconcile`: asked
        (within `reconcile_timeout` seconds) what a lost run did before an operator
        is (`fsm.service.reconcile`); `final_check`: asked once more over the recovery budget.
        `concurrency_limit=N`, `rate_limit=(R, P)`: the kind's global limit, at most N
        running at once and R leases per P seconds across every worker (stored by each
        worker at start unless an operator set one; docs/flow-control.md).
        `payload_type`: an attrs class or a pydantic model; submit validates the payload
        by it and the handler's `ctx.payload` is an instance (docs/typed-payloads.md).
        """
        check_name("kind", kind)
        if not callable(fn):
            raise TypeError(f"handler for kind {kind!r} is not callable: {fn!r}")
        if final_check and reconcile is None:
            raise TypeError(f"kind {kind!r}: final_check=True needs a reconcile function")
        reconciler = None
        if reconcile is not None:
            reconciler = Reconciler(reconcile, float(reconcile_timeout), final_check)
        spec = HandlerSpec(
            kind=kind,
            fn=fn,
            target=typed_path(handler_path(fn), payload_type),
            policy=KindPolicy(
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
                retry_safe=retry_safe,
                deadline_after=deadline_after,
                max_recoveries=max_recoveries,
                marks_outside_calls=marks_outside_calls,
                payload_type=payload_type,
            ),
            reconciler=reconciler,
            limit=declared_limit(kind, concurrency_limit, rate_limit),
        )
        return self.add(spec)

    def policies(self) -> dict[str, KindPolicy]:
        """Kind -> policy: `Engine(store, kinds=handlers.policies())` makes a process
        that only submits check payloads and options as the workers will."""
        return {k: s.policy for k, s in self._specs.items()}

    def reconcilers(self) -> dict[str, Reconciler]:
        """Kind -> reconciler, for the kinds that declare one (the recovery sweep's)."""
        return {k: s.reconciler for k, s in self._specs.items() if s.reconciler is not None}

    def handler(self, kind: str, **opts: Any) -> Callable[[Handler], Handler]:
        """Decorator form of `register`; returns the function unchanged."""
        return registering(self.register, kind, opts)

    # --- schedules (fsm.service.schedules; run by every worker's scheduler, docs/schedules.md) ---

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The schedules declared with `periodic` or `add_schedule`, by name."""
        return dict(self._schedules)

    def add_schedule(self, s: Schedule) -> Schedule:
        if s.name in self._schedules and self._schedules[s.name] != s:
            raise BadInput(f"schedule {s.name!r} is declared twice, differently")
        self._schedules[s.name] = s
        return s

    def periodic(
        self,
        cron: str | None = None,
        *,
        every: float | None = None,
        kind: str | None = None,
        name: str | None = None,
        **opts: Any,
    ) -> Callable[[Handler], Handler]:
        """Decorator: submit a job of `kind` on a cron expression or every `every`
        seconds. Put it above `@handler(kind)` to leave `kind` out. `name` defaults to
        the kind; `opts` are `fsm.service.schedules.schedule`'s (payload, timezone, queue,
        priority, missed, catch_up). The schedule is checked here (BadInput)."""

        def decorate(fn: Handler) -> Handler:
            found = kind or next((k for k, h in self._specs.items() if h.fn is fn), None)
            if found is None:
                raise BadInput(
                    "periodic: give kind=..., or put @periodic above @handler(kind) so the "
                    f"kind of {getattr(fn, '__qualname__', fn)!r} is known"
                )
            self.add_schedule(schedule(name or found, found, cron=cron, every=every, **opts))
            return fn

        return decorate

    # --- set-up and clean-up hooks (fsm.worker.hooks, docs/workers.md) ---

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    def worker_init(self, fn: Hook) -> Hook:
        """Decorator: run `fn()` once in the worker process before it starts working."""
        self._hooks = self._hooks.merged(Hooks(worker_init=check_hook("worker_init", fn)))
        return fn

    def worker_exit(self, fn: Hook) -> Hook:
        """Decorator: run `fn()` once in the worker process after it stopped."""
        self._hooks = self._hooks.merged(Hooks(worker_exit=check_hook("worker_exit", fn)))
        return fn

    def child_init(self, fn: Hook) -> Hook:
        """Decorator: run `fn()` once in each process that runs handlers, before its first
        job (each child of a process executor imports it by name, as it does handlers)."""
        self._hooks = self._hooks.merged(Hooks(child_init=check_hook("child_init", fn)))
        return fn

    def __getitem__(self, kind: str) -> HandlerSpec:
        return self._specs[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def declared_limit(
    kind: str, concurrency: int | None, rate: tuple[int, float] | None
) -> Limit | None:
    """The global limit a handler declares for its kind (None: none), checked now."""
    if concurrency is None and rate is None:
        return None
    if rate is not None and (not isinstance(rate, tuple) or len(rate) != 2):
        raise BadInput(f"kind {kind!r}: rate_limit is (leases, seconds); got {rate!r:.80}")
    count, period = (None, None) if rate is None else rate
    return checked(
        f"kind:{kind}", concurrency=concurrency, rate=count, period=period, origin="code"
    )


def registering(
    register: Callable[..., object], kind: str, opts: Mapping[str, Any]
) -> Callable[[Handler], Handler]:
    """The `@handler(kind, **opts)` decorator over a `register(kind, fn, **opts)`
    (`Handlers.register`, `Worker.register`): registers the function, returns it unchanged."""

    def decorate(fn: Handler) -> Handler:
        register(kind, fn, **opts)
        return fn

    return decorate
