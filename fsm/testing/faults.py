"""The hypothesis fault suite: invariants as executable specs, for any store.

Needs the extra `jobfsm[testing]` (hypothesis). Two ways to run it:

From pytest, subclass `FaultSuite` and say how to make a fresh, empty store (it
is called once per example)::

    from fsm.testing import FaultSuite, KindSpec

    class TestMyStoreUnderFaults(FaultSuite):
        kinds = (KindSpec("email", retry_safe=False, outcomes={"succeed": 9, "fail": 1}),)

        @pytest.fixture(autouse=True)
        def _dir(self, tmp_path):
            self.dir = tmp_path

        def store_factory(self):
            return MyStore(self.dir / f"{uuid.uuid4().hex}.db")

From code or the CLI (`jobfsm faults --store URL`), `run_faults(url, ...)`
makes a fresh store per example for memory://, sqlite:/// (a new file per
example in a temporary directory) and postgresql:// (a new schema per example)
and returns a `FaultReport`.

What it checks is in specs/invariants.md; how to read a failure is in
docs/fault-suites.md.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from ..errors import BadInput, BadStoreURL, MissingExtra
from ..lifecycle.spec import lifecycle
from ..ports import SchemaDroppable, Store
from ..registry import STORE_GROUP

try:
    from hypothesis import Phase
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings as Settings
    from hypothesis.reporting import with_reporter
except ModuleNotFoundError as err:  # pragma: no cover - exercised without the extra
    raise MissingExtra("the fault suites (fsm.testing.faults)", "testing") from err

from .faults_async import ENGINES
from .faults_claims import ClaimsModel
from .faults_commits import CommitsModel
from .faults_concurrency import ConcurrencyModel
from .faults_crash import CrashModel
from .faults_executor import ExecutorModel
from .faults_late import fault_machine
from .faults_limits import LimitsModel
from .faults_machine import (
    DEFAULT_KINDS,
    FaultMachine,
    FaultStats,
    KindSpec,
    suite_policy,
)
from .faults_models import SIZES, Coverage, Database, FaultModel, ModelRun, check_size, handles
from .faults_pauses import PausesModel
from .faults_payloads import PayloadsModel
from .faults_policy import PolicyModel
from .faults_pool import PoolModel
from .faults_race import RaceModel
from .faults_reports import ReportsModel
from .faults_retention import RetentionModel
from .faults_schedules import SchedulesModel
from .faults_txn import TransactionsModel
from .faults_unique import UniqueModel
from .faults_verdict import VerdictModel
from .faults_waits import WaitsModel
from .faults_worker import WorkerModel
from .profiles import load_profile, run_machine

#: entered around each fault model and the machine, by name (the CLI's progress bars)
Announce = Callable[[str], AbstractContextManager[object]]

#: the fault models run beside the main machine, in this order (faults_models.py)
MODELS: tuple[FaultModel, ...] = (
    PolicyModel(),
    RaceModel(),
    VerdictModel(),
    CrashModel(),
    ConcurrencyModel(),
    ExecutorModel(),
    WorkerModel(),
    ClaimsModel(),
    CommitsModel(),
    PoolModel(),
    TransactionsModel(),
    SchedulesModel(),
    LimitsModel(),
    UniqueModel(),
    RetentionModel(),
    PayloadsModel(),
    ReportsModel(),
    PausesModel(),
    WaitsModel(),
)

__all__ = [
    "DEFAULT_KINDS",
    "MODELS",
    "SIZES",
    "FaultMachine",
    "FaultReport",
    "FaultStats",
    "FaultSuite",
    "KindSpec",
    "fault_machine",
    "fresh_databases",
    "fresh_stores",
    "run_faults",
    "run_models",
    "suite_policy",
]


class FaultSuite:
    """pytest base class: subclass it, define `store_factory`, optionally `kinds`.

    The one test it adds runs the fault machine with the active settings profile
    (JOBFSM_PROFILE: dev, ci or thorough), or with `settings` if set.
    """

    kinds: ClassVar[tuple[KindSpec, ...]] = DEFAULT_KINDS
    settings: ClassVar[Settings | None] = None

    #: the size of the fault models (`quick`, `default`, `thorough`)
    size: ClassVar[str] = "quick"

    def store_factory(self) -> Store:
        """A fresh, empty store: called once per hypothesis example."""
        raise NotImplementedError(f"{type(self).__name__} must define store_factory()")

    def test_invariants_hold_under_faults(self) -> None:
        machine = fault_machine(self.store_factory, kinds=tuple(self.kinds))
        run_machine(machine, settings=self.settings or Settings())

    def test_fault_models_hold(self) -> None:
        """The policy, races, crash and concurrency models at `size` (faults_models.py)."""
        stats = FaultStats()
        run_models(self.database, size=self.size, stats=stats, coverage=Coverage())

    def database(self) -> AbstractContextManager[Callable[[], Store]]:
        """A fresh database for one example of a fault model: by default one store from
        `store_factory`, shared by every handle. Override it to hand out separate
        handles on one database (as separate processes hold), which is what the
        concurrency and races models are best at."""
        return handles(self.store_factory, shared=True)


@attrs.frozen
class FaultReport:
    """The outcome of `run_faults`: what ran, what was injected, what held."""

    store_url: str
    profile: str
    seed: int | None
    examples: int
    steps: int
    faults: dict[str, int]
    checks: dict[str, int]
    seconds: float
    ok: bool
    failure: str | None = None
    #: the shrunk failing step sequence, as a runnable Python program
    reproduction: str | None = None
    #: things the run left behind or wants the user to know
    notes: tuple[str, ...] = ()
    size: str = "default"
    #: model name -> seconds it ran (the main machine is "machine")
    models: dict[str, float] = attrs.field(factory=dict)
    #: (state, event) pairs of the spec: how often a store wrote each, and decide decided it
    coverage: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: the model that failed ("machine" or a model's name)
    failed_model: str | None = None

    @property
    def invariants_checked(self) -> int:
        return sum(self.checks.values())


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query)))


#: the session setting of the run's own PostgreSQL connections, unless the URL passes
#: libpq `options` itself: a commit returns before its WAL reaches the disk. Commits
#: stay atomic and visible to every other connection at once; only a crash of the
#: server itself (which no fault model causes) could lose the last ones. The schema is
#: scratch, as the SQLite files are (`synchronous=NORMAL`).
#: (`--name=value`: no space, which a store URL's query would carry as `+`)
SCRATCH_PG_OPTIONS = "--synchronous_commit=off"


def _opener(scheme: str) -> Callable[[str], Store]:
    """The store opener registered for `scheme`, resolved once (entry points are slow)."""
    for ep in entry_points(group=STORE_GROUP):
        if ep.name == scheme:
            try:
                opener: Callable[[str], Store] = ep.load()
            except ModuleNotFoundError as err:
                raise MissingExtra(
                    f"the {scheme!r} store ({err.name} is missing)", "postgres"
                ) from err
            return opener
    raise BadStoreURL(f"no {STORE_GROUP} adapter named {scheme!r}")


#: where per-example SQLite files go: tmpfs when there is one (the files are scratch)
_SCRATCH = "/dev/shm"


def named_schema(url: str) -> str | None:
    """The PostgreSQL schema a run on `url` works in when the URL names it (`?schema=`);
    None when each run makes its own (or the store is not PostgreSQL)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        return None
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True)).get("schema") or None


@contextmanager
def fresh_stores(url: str, notes: list[str] | None = None) -> Iterator[Callable[[], Store]]:
    """A factory that opens a fresh store per call (per example) for `url`'s kind.

    memory:// -> a new memory store. sqlite:///any.db -> a new file per call in a
    temporary directory (on tmpfs when there is one; removed afterwards), with the
    URL's options and `synchronous=NORMAL` unless the URL sets it (scratch data).
    postgresql://... -> a store on the URL's `?schema=` (default: a new schema
    `jobfsm_faults_<run>`); examples do not see each other because each works in
    its own queue. Its connections commit without waiting for the WAL flush
    (`SCRATCH_PG_OPTIONS`) unless the URL passes libpq `options`. The schema is
    dropped afterwards if the store offers `drop_schema()`; otherwise it is left for
    you to drop. Either way a schema left behind is named in `notes`.
    """
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        opener = _opener(scheme)
        yield lambda: opener("memory://")
        return
    if scheme == "sqlite":
        scratch = _SCRATCH if os.access(_SCRATCH, os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="jobfsm-faults-", dir=scratch) as tmp:
            query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
            query.setdefault("synchronous", "NORMAL")
            opener = _opener(scheme)
            counter = iter(range(1 << 62))

            def sqlite_factory() -> Store:
                path = Path(tmp) / f"example-{next(counter)}.db"
                return opener(f"sqlite:///{path}?{urlencode(query)}")

            yield sqlite_factory
        return
    if scheme in ("postgresql", "postgres"):
        query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        schema = named_schema(url) or f"jobfsm_faults_{uuid.uuid4().hex[:8]}"
        session = {} if "options" in query else {"options": SCRATCH_PG_OPTIONS}
        per_example = _with_query(url, schema=schema, pool_max="4", **session)
        # once the run's first store migrated the schema, the next ones only check it
        # (no DDL and no migration lock per example: the schema is the same)
        checked = _with_query(per_example, migrate="false")
        opener = _opener(scheme)
        last: list[Store] = []

        def pg_factory() -> Store:
            store = opener(checked if last else per_example)
            last[:] = [store]
            return store

        try:
            yield pg_factory
        finally:
            if last and isinstance(last[0], SchemaDroppable):
                kept = last[0].drop_schema()
                if kept and notes is not None:
                    notes.append(
                        f"left schema {schema!r} behind: it holds tables jobfsm did not "
                        f"make ({', '.join(kept)})"
                    )
            elif last and notes is not None:
                notes.append(f"left schema {schema!r} behind: DROP SCHEMA {schema} CASCADE")
        return
    raise BadStoreURL(
        f"cannot make a fresh store per example for {url!r}: run_faults knows memory://, "
        "sqlite:/// and postgresql://; for another store subclass fsm.testing.FaultSuite "
        "and give it a store_factory"
    )


@contextmanager
def fresh_databases(url: str, notes: list[str] | None = None) -> Iterator[Database]:
    """Like `fresh_stores`, for the fault models: each call of the yielded `Database`
    opens one fresh database and hands out handles on it. memory://: the one
    store; sqlite:///: a new file (on tmpfs when there is one), each handle its
    own connections; postgresql://: the run's schema, each handle its own pool
    (the models keep examples apart by queue)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        scratch = _SCRATCH if os.access(_SCRATCH, os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="jobfsm-models-", dir=scratch) as tmp:
            query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
            query.setdefault("synchronous", "NORMAL")
            opener = _opener(scheme)
            counter = iter(range(1 << 62))

            def sqlite_database() -> AbstractContextManager[Callable[[], Store]]:
                path = Path(tmp) / f"model-{next(counter)}.db"
                return handles(lambda: opener(f"sqlite:///{path}?{urlencode(query)}"))

            yield sqlite_database
        return
    with fresh_stores(url, notes) as factory:
        shared = scheme == "memory"
        yield lambda: handles(factory, shared=shared)


def run_models(
    database: Database,
    *,
    size: str = "default",
    stats: FaultStats,
    coverage: Coverage,
    seed: int | None = None,
    notes: list[str] | None = None,
    only: Sequence[str] | None = None,
    timings: dict[str, float] | None = None,
    announce: Announce | None = None,
) -> None:
    """Run every registered fault model (or those named in `only`) at `size`; raises
    AssertionError (with `.model` naming the model) on the first broken promise.
    `announce(name)`, if given, is entered around each model (a progress display)."""
    check_size(size)
    ctx = ModelRun(database, size, stats, coverage, seed, notes if notes is not None else [])
    for model in MODELS:
        if only is not None and model.name not in only:
            continue
        started = time.monotonic()
        try:
            with announce(model.name) if announce is not None else nullcontext():
                model.run(ctx)
        except Exception as err:
            err.model = model.name  # type: ignore[attr-defined]
            raise
        finally:
            if timings is not None:
                timings[model.name] = time.monotonic() - started


def _reproduction(
    lines: Sequence[str], url: str, kinds: tuple[KindSpec, ...], engine: str = "sync"
) -> str | None:
    steps: list[str] = []
    for ln in lines:  # the final replay is reported and noted: keep its last copy
        if ln.startswith("state = "):
            steps = []
        if ln.startswith("state"):
            steps.append(ln)
    if not steps:
        return None
    kinds_src = ", ".join(repr(k) for k in kinds)
    mode = "" if engine == "sync" else f", engine={engine!r}"
    head = [
        "# Reproduce: python this_file.py (the shrunk failing sequence, replayed step by step)",
        "from fsm.testing.faults import KindSpec, fault_machine, fresh_stores",
        "",
        f"with fresh_stores({url!r}) as factory:",
        f"    FaultSuiteMachine = fault_machine(factory, kinds=({kinds_src},){mode})",
    ]
    return "\n".join(head + [f"    {ln}" for ln in steps]) + "\n"


def check_engine(engine: str, url: str) -> None:
    """`engine` is known, and "async" is asked only of a store with an asyncio twin."""
    if engine not in ENGINES:
        raise BadInput(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if engine == "async" and scheme not in ("postgresql", "postgres"):
        raise BadInput(
            "the async engine mode needs a store with an asyncio twin (postgresql://...); "
            f"{scheme + '://' if scheme else repr(url)} has none: use the sync engine"
        )


def _one_schema(url: str) -> str:
    """A PostgreSQL URL with a `schema` (a new one unless it names one), so that the
    models and the machine of one run share it; other URLs unchanged."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    if scheme not in ("postgresql", "postgres") or query.get("schema"):
        return url
    return _with_query(url, schema=f"jobfsm_faults_{uuid.uuid4().hex[:8]}")


def _covered(machine: type[FaultMachine], coverage: Coverage) -> type[FaultMachine]:
    """`machine`, also counting the (state, event) pairs every settled example wrote."""

    class Covered(machine):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__()
            renew = self.engine.heartbeat

            def counted(owner: Any, fences: Any) -> dict[str, str]:
                renewed: dict[str, str] = renew(owner, fences)
                for state in renewed.values():
                    coverage.store[(state, "heartbeat")] += 1
                return renewed

            self.engine.heartbeat = counted

        def _settle(self) -> None:
            super()._settle()
            for jid in self.jobs:
                coverage.trail(self.real.history(jid))

    Covered.__name__ = Covered.__qualname__ = machine.__name__
    return Covered


FLAKY_TEXT = (
    "Flaky: a step sequence failed once, then passed when hypothesis replayed it, so it "
    "cannot be shown as a reproduction. In a fault suite this means the store's answers "
    "depend on something outside the example: state shared between examples (another "
    "example's jobs, a reused database or schema), wall-clock time instead of the "
    "injected clock, or a race between threads. Run again with --seed to see whether it "
    "recurs. The failure seen first was: "
)
FLAKY_DATA_TEXT = (
    "Flaky: the same choices led the suite down different paths in two examples (which "
    "rules could run next differed), so hypothesis cannot explore or replay it reliably. "
    "Nothing was found broken; the run's own behaviour is not a function of its choices: "
    "something random or timing-dependent (random ids, thread timing, the order a store "
    "returns unordered rows) decides what the next step may do. Run again; if it "
    "recurs, report it with its seed (the run prints the one it drew, or give --seed)."
)


def explained(err: BaseException) -> str:
    """The failure as one line of text; a hypothesis Flaky report explained in words."""
    from hypothesis.errors import Flaky, FlakyStrategyDefinition

    if isinstance(err, FlakyStrategyDefinition):
        return FLAKY_DATA_TEXT
    if isinstance(err, Flaky):
        inner = getattr(err, "exceptions", ())
        first = inner[0] if inner else err
        text = str(first).splitlines()[0] if str(first) else type(first).__name__
        return FLAKY_TEXT + f"{type(first).__name__}: {text}"
    if isinstance(err, BaseExceptionGroup):
        # several failures (hypothesis's explicit examples): name each one's promise
        parts = [_first_line(sub) for sub in err.exceptions]
        return f"{len(parts)} distinct failures: " + "; ".join(parts)
    return f"{type(err).__name__}: {err}"


def _first_line(err: BaseException) -> str:
    """`Type: first line of the message` of one failure."""
    if isinstance(err, BaseExceptionGroup):
        return explained(err)
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def run_faults(
    store_url: str,
    *,
    examples: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    profile: str | None = None,
    kinds: Sequence[KindSpec] = DEFAULT_KINDS,
    progress: Callable[[FaultStats], None] | None = None,
    shrink: bool = True,
    size: str | None = None,
    models: Sequence[str] | None = None,
    machine: bool = True,
    engine: str = "sync",
    announce: Announce | None = None,
) -> FaultReport:
    """Run the fault suite against fresh stores of `store_url`'s kind; never raises on
    a broken invariant (the report says what broke and how to reproduce it).

    The fault models of `MODELS` (or those named in `models`; `models=()` runs
    none) run first at `size` (default "default"), then the main machine
    (unless `machine=False`) runs `examples` x `steps` (else the size's, else
    the profile's).
    `shrink=False` skips hypothesis's shrinking: the reproduction is then the
    first failing sequence found, longer but available at once.
    `engine="async"` (PostgreSQL only) sends the machine's submits and operator
    actions through AsyncEngine over the store's asyncio twin (faults_async.py).
    `announce(name)` is entered around each model and the machine (progress bars)."""
    check_engine(engine, store_url)
    name = load_profile(profile)
    base = Settings.get_profile(name)
    if size is None and profile is None:
        size = "default"
    sized = SIZES[check_size(size)] if size is not None else None
    chosen = Settings(
        base,
        max_examples=examples if examples is not None else sized[0] if sized else base.max_examples,
        stateful_step_count=(
            steps if steps is not None else sized[1] if sized else base.stateful_step_count
        ),
        database=None,
        derandomize=base.derandomize if seed is None else False,
        phases=tuple(p for p in base.phases if shrink or p is not Phase.shrink),
    )
    stats = FaultStats(progress=progress)
    coverage = Coverage()
    kinds_t = tuple(kinds)
    lines: list[str] = []
    failure: str | None = None
    failed_model: str | None = None
    started = time.monotonic()
    notes: list[str] = []
    timings: dict[str, float] = {}
    machine_examples = machine and chosen.max_examples > 0
    url = _one_schema(store_url)
    if models is None or models:
        with fresh_databases(url, notes) as database:
            try:
                run_models(
                    database,
                    size=size or "default",
                    stats=stats,
                    coverage=coverage,
                    seed=seed,
                    notes=notes,
                    only=models,
                    timings=timings,
                    announce=announce,
                )
            except Exception as err:  # the report carries it
                failure = explained(err)
                failed_model = getattr(err, "model", None)
    if failure is None and machine_examples:
        began = time.monotonic()
        with fresh_stores(url, notes) as factory:
            made = fault_machine(factory, kinds=kinds_t, stats=stats, engine=engine)
            sm = _covered(made, coverage)
            if seed is not None:
                sm = hypothesis_seed(seed)(sm)
            with (
                with_reporter(lambda value: lines.append(str(value))),
                announce("machine") if announce is not None else nullcontext(),
            ):
                try:
                    run_machine(sm, settings=chosen)
                except Exception as err:  # the report carries it
                    failure = explained(err)
                    failed_model = "machine"
                    lines.extend(getattr(err, "__notes__", ()))
        timings["machine"] = time.monotonic() - began
    report_lines = [ln for text in lines for ln in text.splitlines()]
    spec = lifecycle()
    return FaultReport(
        store_url=store_url,
        profile=name,
        seed=seed,
        examples=stats.examples,
        steps=stats.steps,
        faults=dict(stats.faults),
        checks=dict(stats.checks),
        seconds=time.monotonic() - started,
        ok=failure is None,
        failure=failure,
        reproduction=(
            None
            if failure is None or failed_model != "machine"
            else _reproduction(report_lines, store_url, kinds_t, engine)
        ),
        notes=tuple(dict.fromkeys(notes)),
        size=size or name,
        models=timings,
        coverage={
            f"{st}/{ev}": {"store": coverage.store[(st, ev)], "decide": coverage.decide[(st, ev)]}
            for st, ev in sorted(spec.table)
        },
        failed_model=failed_model,
    )
