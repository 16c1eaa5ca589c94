"""The generated parts of docs/ match the spec and the CLI; links between docs resolve."""

from __future__ import annotations

import re
from pathlib import Path

from fsm.cli import docgen

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MY_PAGES = (
    "index.md",
    "getting-started.md",
    "concepts.md",
    "embedding.md",
    "operations.md",
    "troubleshooting.md",
    "security.md",
    "dashboard-security-checks.md",
)


def test_generated_docs_match_the_spec_and_the_cli() -> None:
    stale = docgen.drifted(ROOT)

    names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
    assert not stale, f"{names} drifted from the spec or the CLI: run `{docgen.REGENERATE}`"


def test_concepts_embeds_the_generated_diagram_and_table() -> None:
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")

    assert "```mermaid\nstateDiagram-v2\n" in text
    assert "| state | event | to | guards | effects |" in text


def test_drift_is_detected_when_a_generated_block_is_edited(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    original = (DOCS / "concepts.md").read_text(encoding="utf-8")
    (docs / "concepts.md").write_text(original, encoding="utf-8")
    docgen.regenerate(tmp_path)
    assert docgen.drifted(tmp_path) == []

    edited = original.replace("| running | succeed | succeeded |", "| running | succeed | failed |")
    assert edited != original
    (docs / "concepts.md").write_text(edited, encoding="utf-8")

    assert docgen.drifted(tmp_path) == [docs / "concepts.md"]
    docgen.regenerate(tmp_path)
    assert (docs / "concepts.md").read_text(encoding="utf-8") == original


def test_getting_started_shows_the_readme_set_up_commands_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    guide = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)\n```", readme, re.S)

    assert len(commands) == 2
    for command in commands:
        assert command in guide


def test_links_between_my_pages_resolve() -> None:
    missing = []
    for page in MY_PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            if not (DOCS / target).resolve().exists():
                missing.append(f"{page} -> {target}")

    assert not missing, f"broken links: {missing}"


def test_no_doc_or_source_cites_a_document_outside_the_repository() -> None:
    """The docs stand alone: no citation of a design document users do not have."""
    pattern = re.compile(r"\bDESIGN\b|/work/shared|STYLE\.md")
    found = []
    files = [ROOT / "README.md"]
    for folder, suffixes in (
        ("docs", ("*.md",)),
        ("specs", ("*.md", "*.toml")),
        ("fsm", ("*.py",)),
        ("adapters", ("*.py",)),
        ("examples", ("*.py",)),
    ):
        for suffix in suffixes:
            files += sorted((ROOT / folder).rglob(suffix))
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")

    assert not found, "citations of documents outside the repository:\n" + "\n".join(found)


def test_docs_end_without_internal_notes() -> None:
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert "worked around here" not in text, page.name
        assert "Known issue in shared code" not in text, page.name


def test_index_links_troubleshooting_and_security() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")

    assert "(troubleshooting.md)" in index
    assert "(security.md)" in index
