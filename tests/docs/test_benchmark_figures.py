"""Every figure quoted from a benchmark names the command that measured it.

docs/benchmarks.md: each section holding figures (a number with a unit of time, a rate
or a share) names a `python -m benchmarks...` command, in itself or in a heading above
it. The other pages: a paragraph that says a figure was measured, or quotes the
benchmarks, names the command (a benchmark's, or the pytest command of the test that
measured it) or links to the section of benchmarks.md that does.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|µs|us|jobs/s|/s|%)(?!\w)")
COMMAND = re.compile(r"python -m benchmarks\b")
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
SAYS_MEASURED = re.compile(r"\b(measured|benchmark)", re.I)
#: on other pages a figure may come from a test: its pytest command names it
RUN_COMMAND = re.compile(r"python -m (benchmarks|pytest)\b")
BENCH_LINK = re.compile(r"\(benchmarks\.md#([\w-]+)\)")


def sections(text: str) -> list[tuple[list[str], str]]:
    """(headings from the page title down, body) of each section."""
    out: list[tuple[list[str], str]] = []
    marks = list(HEADING.finditer(text))
    for i, mark in enumerate(marks):
        level = len(mark[1])
        chain = [mark[2]]
        for above in reversed(marks[:i]):
            if len(above[1]) < level:
                chain.insert(0, above[2])
                level = len(above[1])
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((chain, text[mark.end() : end]))
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def unnamed_sections(text: str) -> list[str]:
    missing = []
    for chain, body in sections(text):
        named_above = any(COMMAND.search(h) for h in chain[:-1])
        if FIGURE.search(body) and not named_above and not COMMAND.search(chain[-1] + body):
            missing.append(" > ".join(chain))
    return missing


def test_every_benchmark_section_with_figures_names_its_command() -> None:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")

    missing = unnamed_sections(text)
    assert not missing, f"sections quoting figures without their command: {missing}"


def test_a_section_without_its_command_is_found() -> None:
    page = (
        "# B\n\n## Peers: `python -m benchmarks`\n\n### T\n\n1,200 jobs/s\n\n"
        "## Other\n\n3.5 ms p50\n"
    )

    assert unnamed_sections(page) == ["B > Other"]


def test_measured_figures_on_other_pages_name_their_command() -> None:
    bench = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    named = {
        anchor(chain[-1])
        for chain, body in sections(bench)
        if any(COMMAND.search(h) for h in chain[:-1]) or COMMAND.search(chain[-1] + body)
    }
    missing = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        if page.name == "benchmarks.md":
            continue
        text = page.read_text(encoding="utf-8")
        for paragraph in re.split(r"\n\s*\n", text):
            if not (FIGURE.search(paragraph) and SAYS_MEASURED.search(paragraph)):
                continue
            links = set(BENCH_LINK.findall(paragraph))
            if RUN_COMMAND.search(paragraph) or links & named:
                continue
            missing.append(f"{page.name}: {paragraph.strip()[:120]!r}")

    assert not missing, "measured figures without their command:\n" + "\n".join(missing)
