"""Bulk operator actions: requeue, cancel or resolve every job a filter selects, at most
MAX_BULK jobs per action, each through the Engine's own audited operation.

A bulk action is no new way to change a job: it selects the ids (newest first,
through the store's `JobBrowser`), then calls `Engine.requeue`, `Engine.cancel` or
`Engine.resolve` once per job, with the operator's name and one reason. Each call is
the single-job action exactly (its decision, compare-and-set and audit entry, in its
own transaction), so a job the action no longer applies to, or that moved on, fails
alone with the engine's message and the others go on; the outcome lists how many
were done and the errors of those that were not. Nothing is done to a job the filter
did not select at the time of the action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from ..errors import BadInput, JobFSMError, StoreError
from ..inputs import check_operator_text
from ..ports import MAX_PAGE, JobBrowser, ListRequest
from ..records import Job

if TYPE_CHECKING:
    from .engine import Engine

#: the most jobs one bulk action selects and changes (a larger set takes several)
MAX_BULK = 1000
#: the most errors an outcome keeps verbatim (the rest are only counted)
MAX_ERRORS = 50
#: bulk actions and the engine operation each one repeats
ACTIONS = ("requeue", "cancel", "resolve_succeeded", "resolve_failed")


@attrs.frozen
class Selection:
    """The jobs a bulk action applies to: one state (required: an action applies from
    some states only), and optionally a queue, a kind, a search text (`ListRequest`)."""

    state: str
    queue: str | None = None
    kind: str | None = None
    text: str | None = None

    def request(self, after: str | None, limit: int) -> ListRequest:
        return ListRequest(
            states=(self.state,),
            queues=None if self.queue is None else (self.queue,),
            kinds=None if self.kind is None else (self.kind,),
            text=self.text,
            after=after,
            limit=limit,
        )


@attrs.frozen
class Outcome:
    """What a bulk action did: `done` ids changed, `failed` count, the first MAX_ERRORS
    (id, error) pairs, whether the selection held more than MAX_BULK jobs, and
    `stopped`: why it stopped before the end (the store failed), None if it did not."""

    action: str
    selected: int
    done: tuple[str, ...]
    failed: int
    errors: tuple[tuple[str, str], ...]
    more: bool
    stopped: str | None = None


def operation(
    engine: Engine, action: str, *, actor: str, reason: str, attempts: int = 1
) -> Callable[[str], Job]:
    """The engine's single-job operator action `action` as a call on a job id (the
    dashboard's one-job forms use it too)."""
    if action == "requeue":
        return lambda job_id: engine.requeue(job_id, actor=actor, reason=reason, attempts=attempts)
    if action in ("resolve_succeeded", "resolve_failed"):
        outcome = action.removeprefix("resolve_")
        return lambda job_id: engine.resolve(job_id, outcome=outcome, actor=actor, reason=reason)
    if action == "cancel":
        return lambda job_id: engine.cancel(job_id, actor=actor, reason=reason)
    raise BadInput(f"unknown action {action[:40]!r}; known: {', '.join(ACTIONS)}")


def select(
    browser: JobBrowser, selection: Selection, limit: int = MAX_BULK
) -> tuple[list[str], bool]:
    """(the ids of up to `limit` selected jobs, newest first; whether more are selected),
    read a page at a time: at most limit / MAX_PAGE + 1 reads."""
    if not 1 <= limit <= MAX_BULK:
        raise BadInput(f"a bulk action selects 1 to {MAX_BULK} jobs, got {limit!r}")
    ids: list[str] = []
    after: str | None = None
    while len(ids) < limit:
        page = browser.list_jobs(selection.request(after, min(MAX_PAGE, limit - len(ids))))
        ids += [j.id for j in page.jobs]
        if page.next_cursor is None:
            return ids, False
        after = page.next_cursor
    probe = browser.list_jobs(selection.request(after, 1))
    return ids, bool(probe.jobs)


def apply(
    action: str,
    ids: Sequence[str],
    one: Callable[[str], Job],
    *,
    reason: str,
    more: bool = False,
) -> Outcome:
    """Call `one(id)` (the engine's single-job operation) for each of `ids` in turn;
    an error of one job is recorded and the next goes on. A store error stops the
    action there (what was done stays done, and the outcome says where it stopped):
    it is no fault of the job, and the next ones would meet it too."""
    if action not in ACTIONS:
        raise BadInput(f"unknown bulk action {action[:40]!r}; known: {', '.join(ACTIONS)}")
    if len(ids) > MAX_BULK:
        raise BadInput(f"a bulk action changes at most {MAX_BULK} jobs, got {len(ids)}")
    check_operator_text(f"bulk {action}", "reason", reason)
    done: list[str] = []
    errors: list[tuple[str, str]] = []
    failed = 0
    for job_id in ids:
        try:
            one(job_id)
        except StoreError as err:
            stopped = f"stopped at job {job_id} by a store error: {str(err)[:300]}"
            return Outcome(action, len(ids), tuple(done), failed, tuple(errors), more, stopped)
        except JobFSMError as err:
            failed += 1
            if len(errors) < MAX_ERRORS:
                errors.append((job_id, str(err)[:300]))
            continue
        done.append(job_id)
    return Outcome(action, len(ids), tuple(done), failed, tuple(errors), more)
