"""Every `jobfsm ...` line of a sh or console block in README.md and docs/*.md matches
the `--help` of the command it calls: each subcommand exists and each option is one
that command's help lists.

The help text is the real one (click's CliRunner runs `jobfsm [SUBCOMMAND...] --help`),
so an option renamed or removed in the code fails the page that still shows it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsm.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: every fenced block, with its language
FENCED = re.compile(
    r"^(?P<indent> *)```(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
#: the blocks read for commands: sh and console, and blocks without a language
#: (commands shown beside their output)
SHELL = {"sh", "console", "bash", "shell", ""}
#: an inline code span that is a command: `jobfsm worker --app tasks`
INLINE = re.compile(r"(?<!`)`(jobfsm [^`\n]+)`(?!`)")
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
SEPARATORS = {"&&", "||", "|", ";"}
#: a placeholder for any command (`jobfsm --debug COMMAND ...`): the rest is not checked
PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z_]*)$")
#: inline spans that are names, not commands: the span names of docs/metrics.md
NOT_COMMANDS = {("attempt", "KIND")}


@dataclass(frozen=True)
class Invocation:
    page: str
    line: int
    words: tuple[str, ...]  # the words after `jobfsm`

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: jobfsm {' '.join(self.words)}"


def logical_lines(body: str, first_line: int) -> list[tuple[int, str]]:
    """The block's commands: continuation lines joined, prompts and comments dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", first_line
    for n, raw in enumerate(body.splitlines(), first_line):
        line = raw.strip()
        if not pending:
            start = n
            if line.startswith("$ "):
                line = line[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def invocations(page: Path) -> list[Invocation]:
    text = page.read_text(encoding="utf-8")
    lines: list[tuple[int, str]] = []
    for block in FENCED.finditer(text):
        if block["lang"].strip() not in SHELL:
            continue
        first = text.count("\n", 0, block.start("body")) + 1
        lines += logical_lines(block["body"], first)
    prose = FENCED.sub(lambda m: "\n" * m[0].count("\n"), text)
    for span in INLINE.finditer(prose):
        lines.append((prose.count("\n", 0, span.start()) + 1, span[1]))
    found = []
    for n, line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            pytest.fail(f"{page.name}:{n}: cannot split the shell line {line!r}")
        command: list[str] | None = None
        for word in [*words, ";"]:
            if word in SEPARATORS:
                if command is not None:
                    found.append(Invocation(page.name, n, tuple(command)))
                command = None
            elif command is not None:
                command.append(word)
            elif word == "jobfsm" or word.endswith("/jobfsm"):
                command = []
    return found


def all_invocations() -> list[Invocation]:
    return [inv for page in PAGES for inv in invocations(page) if inv.words not in NOT_COMMANDS]


@cache
def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="jobfsm")
    assert result.exit_code == 0, f"`jobfsm {' '.join(path)} --help` failed: {result.output}"
    return result.output


def subcommands(path: tuple[str, ...]) -> set[str]:
    """The subcommands `jobfsm PATH --help` lists (empty for a command)."""
    text = help_of(path)
    if "\nCommands:\n" not in text:
        return set()
    section = text.split("\nCommands:\n", 1)[1]
    return {m[1] for m in re.finditer(r"^  (\S+)", section, re.M)}


def options(path: tuple[str, ...]) -> set[str]:
    text = help_of(path)
    section = text.split("\nOptions:\n", 1)[1].split("\nCommands:\n", 1)[0]
    return set(OPTION.findall(section))


def problems(inv: Invocation) -> list[str]:
    path: tuple[str, ...] = ()
    found = []
    words = list(inv.words)
    while words:
        word = words.pop(0)
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name not in options(path):
                found.append(f"{inv}: `jobfsm {' '.join(path)} --help` has no {name}")
            continue
        commands = subcommands(path)
        if not commands:
            continue  # an argument of the command
        if PLACEHOLDER.match(word):
            break
        if word not in commands:
            found.append(f"{inv}: `jobfsm {' '.join(path)} --help` has no command {word!r}")
            break
        path = (*path, word)
    return found


def test_every_cli_line_matches_the_help_of_its_command() -> None:
    lines = all_invocations()
    found = [p for inv in lines for p in problems(inv)]

    assert not found, "\n".join(found)
    print(f"{len(lines)} `jobfsm` lines checked against --help")
    assert len(lines) >= 150, f"only {len(lines)} `jobfsm` lines found"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("jobfsm worker --app tasks --no-such-option 3", "has no --no-such-option"),
        ("jobfsm no-such-command --store x", "has no command 'no-such-command'"),
        ("jobfsm schedules no-such-subcommand", "has no command 'no-such-subcommand'"),
        ("jobfsm list --state failed --kind=x --colour", "has no --colour"),
    ],
)
def test_a_wrong_line_is_named(line: str, expected: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"text\n\n```sh\n$ {line}  # a comment\n```\n", encoding="utf-8")
    [inv] = invocations(page)

    [problem] = problems(inv)
    assert expected in problem
    assert "page.md:4" in problem


def test_lines_are_joined_split_and_stripped(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ X=1 jobfsm status \\\n"
        "    --store sqlite:///a.db && jobfsm list | head\n```\n",
        encoding="utf-8",
    )

    assert [inv.words for inv in invocations(page)] == [
        ("status", "--store", "sqlite:///a.db"),
        ("list",),
    ]
