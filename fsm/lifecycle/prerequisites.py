"""The guards and effects of dependencies (specs/job.toml `submit` and `requeue` to
`waiting`, `dependencies_met`, `dependency_failed`; docs/dependencies.md);
`fsm.lifecycle.rules` registers them with the others.

Pure, like every rule: the prerequisites' states come in the event's arguments, as
whoever offers the release read them (`fsm.service.dependencies`).
"""

from __future__ import annotations

from ..errors import BadInput
from .step import Effect, Guard, Step

#: the one state in which a prerequisite counts as done well
PREREQUISITE_SUCCEEDED = "succeeded"
#: states in which a prerequisite counts as failed; "gone" stands for a prerequisite
#: that is no longer stored (pruned): its success cannot be shown, so it did not succeed
PREREQUISITE_GONE = "gone"
PREREQUISITE_FAILED = frozenset({"failed", "cancelled", "investigate", PREREQUISITE_GONE})


def _prerequisite_states(s: Step) -> dict[str, str]:
    """The `prerequisites` argument: {prerequisite id: its state when it was read}."""
    states = s.args.get("prerequisites")
    if (
        not isinstance(states, dict)
        or not states
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in states.items())
    ):
        raise BadInput(
            f"job {s.job.id}: a dependency event needs prerequisites = {{id: state}}, "
            f"got {states!r:.200}"
        )
    return states


def _has_prerequisites(s: Step) -> bool:
    """Submitted with `after=` (the rule is set exactly when there are prerequisites)."""
    return bool(s.args.get("after")) or s.job.on_failed_dependency is not None


def _prerequisites_succeeded(s: Step) -> bool:
    return all(v == PREREQUISITE_SUCCEEDED for v in _prerequisite_states(s).values())


def _prerequisite_failed(s: Step) -> bool:
    return any(v in PREREQUISITE_FAILED for v in _prerequisite_states(s).values())


def _prerequisites_finished(s: Step) -> bool:
    done = PREREQUISITE_FAILED | {PREREQUISITE_SUCCEEDED}
    return all(v in done for v in _prerequisite_states(s).values())


def _on_failed(rule: str) -> Guard:
    def guard(s: Step) -> bool:
        return s.job.on_failed_dependency == rule

    return guard


def _record_prerequisites(s: Step) -> None:
    """The prerequisites' states are in the audit entry (the event's argument); a failed
    one is also named in `last_error`."""
    failed = sorted(k for k, v in _prerequisite_states(s).items() if v in PREREQUISITE_FAILED)
    if failed:
        states = _prerequisite_states(s)
        named = ", ".join(f"{k} {states[k]}" for k in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        s.error = f"prerequisite {named}{more} (on_failed_dependency={s.job.on_failed_dependency})"
        s.changes["last_error"] = s.error


GUARDS: dict[str, Guard] = {
    "has_prerequisites": _has_prerequisites,
    "prerequisites_succeeded": _prerequisites_succeeded,
    "prerequisite_failed": _prerequisite_failed,
    "prerequisites_finished": _prerequisites_finished,
    "on_failed_cancel": _on_failed("cancel"),
    "on_failed_run": _on_failed("run"),
    "on_failed_investigate": _on_failed("investigate"),
}

EFFECTS: dict[str, Effect] = {
    "record_prerequisites": _record_prerequisites,
}
