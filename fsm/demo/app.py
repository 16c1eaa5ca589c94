"""The demo's job kinds. Each handler does its "outside effect" through the fenced ledger.

Usable on its own: `jobfsm worker --app fsm.demo.app:handlers`. A payload names the
ledger directory, how long the work takes and how likely a transient failure is,
so a handler's behaviour is a pure function of its job (reproducible with a seed).
"""

from __future__ import annotations

import random
from typing import Any

from ..errors import Ambiguous, Permanent
from ..handling.attempt import Context
from ..worker.handlers import Handlers
from .effects import Ledger

handlers = Handlers()

#: what the demo submits, by kind: (share of jobs, what the kind shows)
KINDS: dict[str, tuple[float, str]] = {
    "demo.fast": (0.40, "finishes in milliseconds"),
    "demo.slow": (0.25, "runs about half a second; crashes catch it running"),
    "demo.flaky": (0.25, "fails transiently about a third of the time; retried with backoff"),
    "demo.charge": (0.10, "not retry-safe: a crash mid-run parks it in investigate"),
}
#: attempt budget of the flaky kind (each attempt fails with probability FLAKY_P)
FLAKY_ATTEMPTS = 6
FLAKY_P = 0.35
#: chance that a charge's provider leaves its outcome unknown (handler raises Ambiguous)
AMBIGUOUS_P = 0.03
#: longest a demo handler runs, in seconds (bounds the demo's runtime)
MAX_WORK_SECONDS = 5.0


def _rng(ctx: Context) -> random.Random:
    return random.Random(f"{ctx.job.id}:{ctx.attempt}:{ctx.payload.get('seed', 0)}")


def _work(ctx: Context, seconds: float) -> None:
    """Sleep in slices, stopping cooperatively on a cancel request."""
    left = min(max(seconds, 0.0), MAX_WORK_SECONDS)
    while left > 0:
        step = min(left, 0.05)
        if ctx.cancelled.wait(step):
            ctx.check_cancelled()
        left -= step
        ctx.progress(left=round(left, 3))
    ctx.check_cancelled()


def _effect(ctx: Context, what: str) -> dict[str, Any]:
    try:
        ledger = Ledger(ctx.payload["ledger"])
    except (KeyError, TypeError, ValueError) as err:
        raise Permanent(f"job {ctx.job.id}: no usable ledger in its payload: {err}") from err
    outcome = ledger.commit(ctx.job.id, ctx.fence, ctx.attempt, what)
    return {"effect": outcome, "attempt": ctx.attempt, "fence": ctx.fence}


@handlers.handler("demo.fast", max_attempts=3)
def fast(ctx: Context) -> dict[str, Any]:
    _work(ctx, ctx.payload["ms"] / 1000)
    return _effect(ctx, "fast")


@handlers.handler("demo.slow", max_attempts=4)
def slow(ctx: Context) -> dict[str, Any]:
    _work(ctx, ctx.payload["ms"] / 1000)
    return _effect(ctx, "slow")


@handlers.handler("demo.flaky", max_attempts=FLAKY_ATTEMPTS)
def flaky(ctx: Context) -> dict[str, Any]:
    _work(ctx, ctx.payload["ms"] / 1000)
    if _rng(ctx).random() < FLAKY_P:
        raise ConnectionError(f"upstream timed out (transient, attempt {ctx.attempt})")
    return _effect(ctx, "flaky")


@handlers.handler("demo.charge", retry_safe=False, max_attempts=3)
def charge(ctx: Context) -> dict[str, Any]:
    _work(ctx, ctx.payload["ms"] / 1000)
    if _rng(ctx).random() < AMBIGUOUS_P:
        raise Ambiguous("payment provider timed out: the charge may or may not have happened")
    return _effect(ctx, f"charged {ctx.payload.get('cents', 0)} cents")


def payload_for(kind: str, rng: random.Random, ledger: str, seed: int) -> dict[str, Any]:
    """A payload for `kind`: work time drawn from `rng`."""
    ms = {
        "demo.fast": rng.randint(5, 30),
        "demo.slow": rng.randint(300, 900),
        "demo.flaky": rng.randint(20, 80),
        "demo.charge": rng.randint(250, 600),
    }[kind]
    payload: dict[str, Any] = {"ledger": ledger, "ms": ms, "seed": seed}
    if kind == "demo.charge":
        payload["cents"] = rng.randint(100, 99_999)
    return payload
