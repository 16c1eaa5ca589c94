"""Mutation score of `jobfsm faults`: `python -m benchmarks.mutation [options]`.

Every mutant of `tests/property/mutants.py` (`PATCHES`) is one careless change to
production code: a guard that forgets the backoff delay, a renewal that keeps the
version, a claim without row locks. For each mutant and each store it applies to,
this copies the tree (fsm/, adapters/, specs/) to a temporary directory, applies the
patch there (never to the working tree), and runs the fault suite from the copy as
a user would, at the default size and without shrinking:

    python -m fsm.cli faults --store URL --no-shrink

The mutant is killed when the run fails. The table gives, per mutant and store,
whether it was killed, the time to kill (wall clock of the whole run, start-up
included), the fault model that caught it and the promise it named. Options:

    --mutant NAME     only this mutant (repeatable)
    --store KIND      only mutants of these stores: memory, sqlite, postgres (repeatable)
    --size SIZE       quick, default (the default), thorough
    --timeout S       bound on one run (default 600 s): a run that takes longer is
                      reported as survived (timeout)
    --pg URL          PostgreSQL server (default $JOBFSM_TEST_PG or
                      postgresql://postgres@127.0.0.1:5432/postgres); each run
                      uses its own schema, dropped afterwards
    --json FILE       also write the rows as JSON
    --write-docs      put the table into docs/fault-suites.md (between its markers)
    --no-baseline     skip the first run of each store on the unchanged tree (by
                      default a failing baseline stops the benchmark: a suite that
                      fails on correct code would "kill" every mutant)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.property.mutants import PATCHES, Patch, apply_patch  # noqa: E402

TREE = ("fsm", "adapters", "specs")
DOCS = REPO / "docs" / "fault-suites.md"
BEGIN = "<!-- mutation-table:begin (python -m benchmarks.mutation --write-docs) -->"
END = "<!-- mutation-table:end -->"
PG_DEFAULT = os.environ.get("JOBFSM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


#: the broker the RabbitMQ mutants run against (their store is a memory store)
AMQP_URL = os.environ.get("JOBFSM_TEST_RABBIT", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _url(store: str, workdir: Path, pg: str, schema: str) -> str:
    if store in ("memory", "amqp"):
        return "memory://"
    if store == "sqlite":
        return f"sqlite:///{workdir / 'mutant.db'}"
    sep = "&" if "?" in pg else "?"
    return f"{pg}{sep}schema={schema}"


def _drop_schema(pg: str, schema: str) -> None:
    try:
        import psycopg
    except ModuleNotFoundError:
        return
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run_one(
    patch: Patch,
    store: str,
    *,
    size: str,
    timeout: float,
    pg: str,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Apply `patch` in a copy of the tree and run `jobfsm faults` there on `store`
    (with `extra` arguments, e.g. `("--exhaustive", "--scope", "tiny")`)."""
    with tempfile.TemporaryDirectory(prefix=f"jobfsm-mutant-{patch.name}-") as tmp:
        root = Path(tmp)
        for part in TREE:
            shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        apply_patch(root, patch)
        schema = f"jobfsm_mut_{uuid.uuid4().hex[:10]}"
        cmd = [sys.executable, "-m", "fsm.cli", "faults", "--store", _url(store, root, pg, schema)]
        # one process: the model that catches a mutant, and the promise it names, do not
        # then depend on which of `--jobs N` processes fails first (a race between them
        # named a Flaky failure instead of K3 for sqlite-begin-deferred), and the time to
        # kill is the one-process time of docs/fault-suites.md's table
        cmd += ["--no-shrink", "--jobs", "1", *extra]
        if store == "amqp":
            cmd += ["--delivery", AMQP_URL]
        if size != "default":
            cmd.append(f"--{size}")
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("JOBFSM_PROFILE", None)
        started = time.monotonic()
        try:
            done = subprocess.run(
                cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
            code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            code, out, err = None, "", "timeout"
        seconds = time.monotonic() - started
        if store == "postgres":
            _drop_schema(pg, schema)
    failure = next((ln for ln in err.splitlines() if ln.startswith("FAILED: ")), "")
    model = re.search(r"failed in fault model: (\w+)", err)
    promise = re.search(r"\b([A-Z]\d)\b", failure)
    killed = code == 1 and bool(failure)
    return {
        "mutant": patch.name,
        "area": patch.area,
        "store": store,
        "killed": killed,
        "seconds": round(seconds, 1),
        "model": model.group(1) if model else "",
        "promise": promise.group(1) if promise else "",
        "failure": failure[len("FAILED: ") :][:300],
        "exit": code,
        "tail": "" if killed else (err or out)[-600:],
        "stderr": err[-4000:],
        "why": patch.why,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| mutant | area | store | killed | time to kill | caught by | promise |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['mutant']}` | {r['area']} | {r['store']} | "
            f"{'yes' if r['killed'] else '**no**'} | {r['seconds']:.1f} s | "
            f"{r['model'] or '-'} | {r['promise'] or '-'} |"
        )
    killed = sum(r["killed"] for r in rows)
    lines.append("")
    lines.append(f"Kill rate: {killed} of {len(rows)} ({100.0 * killed / max(len(rows), 1):.0f}%).")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    """Replace the generated block of docs/fault-suites.md with `text`."""
    doc = DOCS.read_text()
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOCS}: the markers {BEGIN!r} and {END!r} are missing")
    DOCS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation", description=__doc__)
    parser.add_argument("--mutant", action="append", default=[])
    parser.add_argument("--store", action="append", default=[])
    parser.add_argument("--size", choices=("quick", "default", "thorough"), default="default")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--pg", default=PG_DEFAULT)
    parser.add_argument("--json", default=None)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args(argv)
    known = {p.name for p in PATCHES}
    unknown = sorted(set(args.mutant) - known)
    if unknown:
        parser.error(f"unknown mutants {unknown}; known: {sorted(known)}")
    chosen = [
        (patch, store)
        for patch in PATCHES
        if not args.mutant or patch.name in args.mutant
        for store in patch.stores
        if not args.store or store in args.store
    ]
    if not args.no_baseline:
        for store in sorted({store for _, store in chosen}):
            base = Patch("baseline", "-", "fsm/__init__.py", (), (store,), "the unchanged tree")
            row = run_one(base, store, size=args.size, timeout=args.timeout, pg=args.pg)
            print(
                f"{'baseline (unchanged tree)':45s} {store:9s} {row['seconds']:7.1f}s", flush=True
            )
            if row["exit"] != 0:
                print(f"the suite fails on the unchanged tree ({store}): {row['failure']}")
                return 2
    rows: list[dict[str, Any]] = []
    for patch in PATCHES:
        if args.mutant and patch.name not in args.mutant:
            continue
        for store in patch.stores:
            if args.store and store not in args.store:
                continue
            row = run_one(patch, store, size=args.size, timeout=args.timeout, pg=args.pg)
            rows.append(row)
            status = "killed" if row["killed"] else "SURVIVED"
            print(
                f"{patch.name:45s} {store:9s} {status:8s} {row['seconds']:7.1f}s "
                f"{row['model']:12s} {row['failure'][:90]}",
                flush=True,
            )
            if not row["killed"]:
                print(f"    exit {row['exit']}: {row['tail'][-300:]}", flush=True)
    print()
    text = f"`python -m benchmarks.mutation --size {args.size}`\n\n{table(rows)}"
    print(text)
    if args.write_docs:
        write_docs(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["killed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
