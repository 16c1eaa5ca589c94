"""Render a benchmark run as Markdown: machine facts, targets, every figure, every ratio.

Ratios are taken between figures of the same run only. A comparison whose figures
are missing (a suite not selected, a task that failed) is shown as "not measured",
never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.goals import (
    AUDIT_NOTE,
    BOUNDS,
    LATENCY_BOUNDS,
    LATENCY_COMPARISONS,
    PAIR_BOUNDS,
    RECOVERY_P99_S,
    RECOVERY_TARGET_S,
    RECOVERY_TARGETS,
    SCALE_COMPARISONS,
    THROUGHPUT_COMPARISONS,
    ZOMBIE_KEYS,
    Bound,
    Comparison,
)
from benchmarks.harness import Measurement
from benchmarks.machine import MACHINE_FACT

__all__ = [
    "BOUNDS",
    "LATENCY_BOUNDS",
    "LATENCY_COMPARISONS",
    "PAIR_BOUNDS",
    "RECOVERY_TARGETS",
    "SCALE_COMPARISONS",
    "THROUGHPUT_COMPARISONS",
    "ZOMBIE_KEYS",
    "Bound",
    "Comparison",
    "Report",
    "fmt",
    "splice",
]


def _p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank): the largest value for fewer than 100 runs."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def fmt(value: float, unit: str = "") -> str:
    """A figure for a table: thousands separated, else three significant places."""
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}" if unit else text


def spread(m: Measurement) -> str:
    if len(m.values) < 2:
        return ""
    return f"{fmt(m.low)}-{fmt(m.high)}"


def _settings(settings: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in settings.items())


class Report:
    def __init__(self, rows: Iterable[Measurement]) -> None:
        self.rows = list(rows)
        self.by_key = {m.key: m for m in self.rows}

    def best(self, keys: Sequence[str], lower: bool) -> Measurement | None:
        """The figure of `keys` with the best median (lowest if `lower`), or None."""
        got = [self.by_key[k] for k in keys if k in self.by_key and self.by_key[k].values]
        if not got:
            return None
        return (min if lower else max)(got, key=lambda m: m.median)

    def sides(self, c: Comparison) -> tuple[Measurement, Measurement] | None:
        """(our best figure, the best of theirs), or None when a side is missing."""
        ours = self.best((c.ours, *c.ours_among), c.lower_is_better)
        best = self.best(c.theirs, c.lower_is_better)
        return None if ours is None or best is None else (ours, best)

    def ratio(self, c: Comparison) -> tuple[float, str]:
        """(ours / best of theirs, the key of that best), or NaN when a side is missing."""
        got = self.sides(c)
        if got is None:
            return float("nan"), ""
        ours, best = got
        return ours.median / best.median, best.key

    def verdict(self, c: Comparison) -> tuple[str, str, str, bool | None]:
        """(label, measured, bound, met) of a comparison with a target; the measured
        value is the ratio of medians, with the spread of the per-repeat ratios when
        both sides were repeated alike (the same run's repeats, in order)."""
        assert c.target is not None
        value, _ = self.ratio(c)
        if math.isnan(value):
            met = None
        else:
            met = value <= c.target if c.lower_is_better else value >= c.target
        bound = f"{'<=' if c.lower_is_better else '>='} {c.target}x"
        shown = "not measured" if met is None else f"{value:.2f}x"
        got = self.sides(c)
        if met is not None and got is not None:
            ours, best = got
            if len(ours.values) == len(best.values) > 1 and all(best.values):
                each = [a / b for a, b in zip(ours.values, best.values, strict=True)]
                shown += f" (repeats {min(each):.2f}-{max(each):.2f}x)"
            if ours.key != c.ours:
                shown += f" (`{ours.key}`)"
        return (c.label, shown, bound, met)

    def bound(self, b: Bound) -> tuple[str, str, str, bool | None]:
        """(label, measured, bound, met) of a `Bound`, with the spread of its repeats."""
        sign = ">=" if b.higher_is_better else "<="
        m = self.best((b.key, *b.among), lower=not b.higher_is_better)
        if m is None:
            return (b.label, "not measured", f"{sign} {fmt(b.bound, b.unit)}", None)
        value = m.high if b.stat == "max" else m.median
        shown = fmt(value, b.unit)
        if b.stat == "max":
            shown += f" (max of {len(m.values)})"
        elif len(m.values) > 1:
            shown += f" ({spread(m)} over {len(m.values)} repeats)"
        if b.among:
            shown += f" (`{m.key}`)"
        floor = self.by_key.get(b.floor) if b.floor else None
        if floor is not None and floor.values:
            shown += f" (floor, {floor.label}: {fmt(floor.median, b.unit)})"
        met = value >= b.bound if b.higher_is_better else value <= b.bound
        return (b.label, shown, f"{sign} {fmt(b.bound, b.unit)}", met)

    def verdicts(self) -> list[tuple[str, str, str, bool | None]]:
        """(target, measured, bound, met) for every target of the issue."""
        out: list[tuple[str, str, str, bool | None]] = []
        out += [self.verdict(c) for c in THROUGHPUT_COMPARISONS if c.target is not None]
        out += [self.bound(b) for b in BOUNDS]
        out += [self.bound(b) for b in LATENCY_BOUNDS]
        out += [self.verdict(c) for c in LATENCY_COMPARISONS if c.target is not None]
        out += [self.bound(b) for b in PAIR_BOUNDS]
        for key in RECOVERY_TARGETS:
            m = self.by_key.get(key)
            if m is None or not m.values:
                out.append((f"recovery p99, {key}", "not measured", "<= 1.5 s", None))
                continue
            never = int(m.facts.get("never_rerun", 0))
            p99 = _p99(m.values)
            ok = never == 0 and p99 <= RECOVERY_P99_S
            what = f"{fmt(p99, 's')} (of {len(m.values)} runs)"
            out.append((f"recovery p99 after kill -9: {m.label}", what, "<= 1.5 s", ok))
        out += [self.verdict(c) for c in SCALE_COMPARISONS if c.target is not None]
        for key in RECOVERY_TARGETS:
            m = self.by_key.get(key)
            if m is None:
                out.append((f"recovery p50, {key}", "not measured", "<= 1 s", None))
                continue
            never = int(m.facts.get("never_rerun", 0))
            ok = bool(m.values) and never == 0 and m.median <= RECOVERY_TARGET_S
            out.append((f"recovery p50 after kill -9: {m.label}", fmt(m.median, "s"), "<= 1 s", ok))
        for key in ZOMBIE_KEYS:
            m = self.by_key.get(key)
            if m is None:
                out.append((f"effects committed twice, {key}", "not measured", "0", None))
                continue
            twice = int(sum(m.values))
            out.append((f"effects committed twice: {m.label}", str(twice), "0", twice == 0))
        lost = [
            (m.key, int(m.facts.get("lost", 0)))
            for m in self.rows
            if m.key.startswith("recovery.jobfsm.")
        ]
        if lost:
            total = sum(n for _, n in lost)
            out.append(("jobs lost, every jobfsm recovery scenario", str(total), "0", total == 0))
        return out

    def markdown(self, facts: dict[str, Any], command: str) -> str:
        lines = [
            f"Run {facts['date']} with `{command.strip()}`.",
            "",
            "| machine | |",
            "|---|---|",
            f"| cores | {facts['cores']} ({facts['cpu']}) |",
            f"| memory | {facts['memory_gib']} GiB |",
            "| load average at start (1, 5, 15 min) | "
            + ", ".join(map(str, facts["load_average"]))
            + " |",
            f"| Python / kernel | {facts['python']} / {facts['kernel']} |",
            "| SQLite / PostgreSQL / RabbitMQ | "
            + " / ".join(str(facts[k]) for k in ("sqlite", "postgresql", "rabbitmq"))
            + " |",
            "| packages | " + ", ".join(f"{k} {v}" for k, v in facts["packages"].items()) + " |",
            "",
            "### Targets",
            "",
            "| target | measured | bound | met |",
            "|---|---:|---:|---|",
        ]
        for label, value, bound, met in self.verdicts():
            mark = "not measured" if met is None else ("yes" if met else "**no**")
            lines.append(f"| {label} | {value} | {bound} | {mark} |")
        lines += self._throughput() + self._pairs() + self._latency()
        lines += self._recovery() + self._scale()
        return "\n".join(lines) + "\n"

    def _throughput(self) -> list[str]:
        rows = [m for m in self.rows if m.key.startswith(("throughput.", "core."))]
        if not rows:
            return []
        lines = self._figures("Throughput, end to end (no-op jobs)", rows, THROUGHPUT_COMPARISONS)
        lines += self._machine(rows)
        lines += ["", AUDIT_NOTE, "", "Settings (and facts) of each figure:", ""]
        lines += [f"- {m.label}: {_settings({**m.settings, **m.facts})}" for m in rows]
        return lines

    def _figures(
        self, title: str, rows: list[Measurement], comparisons: Sequence[Comparison]
    ) -> list[str]:
        """A section's table of figures, then its ratios (medians of the same run)."""
        lines = [
            "",
            f"### {title}",
            "",
            "| figure | median | min-max | unit |",
            "|---|---:|---:|---|",
        ]
        lines += [f"| {m.label} | {fmt(m.median)} | {spread(m)} | {m.unit} |" for m in rows]
        lines += ["", "| ratio (medians, same run) | value | against |", "|---|---:|---|"]
        for c in comparisons:
            value, against = self.ratio(c)
            shown = "not measured" if math.isnan(value) else f"{value:.2f}x"
            lines.append(f"| {c.label} | {shown} | {f'`{against}`' if against else ''} |")
        return lines

    @staticmethod
    def _machine(rows: list[Measurement]) -> list[str]:
        """The whole machine's CPU per job of each row that measured it, part by part."""
        metered = [m for m in rows if isinstance(m.facts.get(MACHINE_FACT), dict)]
        if not metered:
            return []
        parts = list(metered[0].facts[MACHINE_FACT])
        lines = [
            "",
            "The whole machine's CPU per job, us, over each row's timed window (medians of its "
            "repeats, from /proc; a server's share counts every client it served):",
            "",
            "| figure | " + " | ".join(parts) + " |",
            "|---" + "|---:" * len(parts) + "|",
        ]
        for m in metered:
            fact = m.facts[MACHINE_FACT]
            cells = [fact.get(p, "") for p in parts]
            shown = [fmt(c) if isinstance(c, int | float) else str(c) for c in cells]
            lines.append(f"| {m.label} | " + " | ".join(shown) + " |")
        return lines

    def _pairs(self) -> list[str]:
        rows = [m for m in self.rows if m.key.startswith("pairs.")]
        if not rows:
            return []
        lines = [
            "",
            "### The broker path against dramatiq and polling, alternated pairs",
            "",
            "| figure | median | min-max | each repeat, in order | unit |",
            "|---|---:|---:|---|---|",
        ]
        for m in rows:
            each = ", ".join(fmt(v) for v in m.values)
            lines.append(f"| {m.label} | {fmt(m.median)} | {spread(m)} | {each} | {m.unit} |")
        lines += ["", "Settings and facts of each figure:", ""]
        lines += [f"- {m.label}: {_settings({**m.settings, **m.facts})}" for m in rows]
        return lines

    def _latency(self) -> list[str]:
        """One row per system and offered load: p50, p99 and max (medians of the repeats)."""
        rows = [m for m in self.rows if m.key.startswith("latency.")]
        if not rows:
            return []
        table: dict[tuple[str, int], dict[str, Measurement]] = {}
        for m in rows:
            _, _, rest = m.key.partition(".")
            system, rate, stat = rest.rsplit(".", 2)
            table.setdefault((system, int(rate.removeprefix("r"))), {})[stat] = m
        lines = [
            "",
            "### Latency, submit to start (ms; medians of the repeats, min-max of p99)",
            "",
            "| system | jobs/s offered | achieved | p50 | p99 | p99 min-max | max | setting |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for (_system, rate), stats in table.items():
            p99 = stats.get("p99")
            any_m = next(iter(stats.values()))
            achieved = any_m.facts.get("achieved jobs/s") or []
            got = fmt(sorted(achieved)[len(achieved) // 2]) if achieved else "-"
            setting = "; ".join(f"{k}: {v}" for k, v in any_m.settings.items())
            cells = [fmt(stats[s].median) if s in stats and stats[s].values else "-"
                     for s in ("p50", "p99", "max")]  # fmt: skip
            label = any_m.label.split(":")[0]
            lines.append(
                f"| {label} | {rate:,} | {got} | {cells[0]} | {cells[1]} "
                f"| {spread(p99) if p99 else ''} | {cells[2]} | {setting} |"
            )
        lines += ["", "| ratio (medians, same run) | value | against |", "|---|---:|---|"]
        for c in LATENCY_COMPARISONS:
            value, against = self.ratio(c)
            shown = "not measured" if math.isnan(value) else f"{value:.2f}x"
            lines.append(f"| {c.label} | {shown} | {f'`{against}`' if against else ''} |")
        return lines

    def _recovery(self) -> list[str]:
        rows = [m for m in self.rows if m.key.startswith("recovery.")]
        if not rows:
            return []
        lines = [
            "",
            "### Crash recovery",
            "",
            "| scenario | re-run after (p50, max) | re-run | handler completed twice "
            "| lost | stuck |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for m in rows:
            f = m.facts
            if m.unit == "s":
                timing = f"{fmt(m.median, 's')}, {fmt(m.high, 's')}" if m.values else "never"
            else:  # a zombie scenario: what counts is the effect, not the handler body
                timing = f"{int(sum(m.values))} {m.unit} twice"
                if "stale_effects_refused" in f:
                    timing += f"; {f['stale_effects_refused']} stale write(s) refused"
            rerun = f"{f.get('rerun', len(m.values))}/{f.get('runs', len(m.values))}"
            bound = f.get("not_rerun_within_s")
            if f.get("never_rerun") and isinstance(bound, int | float):
                rerun += f" (none within {bound:g} s)"
            lines.append(
                f"| {m.label} | {timing} | {rerun} | {f.get('ran_twice', '-')} "
                f"| {f.get('lost', '-')} | {f.get('stuck', '-')} |"
            )
        lines += ["", "Settings and documented behaviour of each scenario:", ""]
        lines += [f"- {m.label}: {_settings(m.settings)}. {m.note}" for m in rows]
        return lines

    def _scale(self) -> list[str]:
        rows = [m for m in self.rows if m.key.startswith("scale.")]
        if not rows:
            return []
        lines = self._figures("Scale", rows, SCALE_COMPARISONS)
        lines += ["", "Settings and facts of each figure:", ""]
        lines += [f"- {m.label}: {_settings({**m.settings, **m.facts})}" for m in rows]
        return lines


BEGIN = "<!-- BEGIN python -m benchmarks: generated, do not edit by hand -->"
END = "<!-- END python -m benchmarks -->"


def splice(document: str, generated: str) -> str:
    """Replace the generated block of `document` (appended if it has none)."""
    block = f"{BEGIN}\n{generated}{END}\n"
    if BEGIN in document and END in document:
        head, rest = document.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + block + tail.lstrip("\n")
    return document.rstrip("\n") + "\n\n" + block
