"""`jobfsm spec check` and the loader: a broken spec is named by file and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fsm.errors import SpecError
from fsm.lifecycle.spec import check_spec, default_spec_path, load_spec

GOOD = default_spec_path().read_text(encoding="utf-8")


def broken(tmp_path: Path, old: str, new: str) -> Path:
    assert old in GOOD, old
    path = tmp_path / "job.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    return path


def test_the_shipped_spec_is_valid() -> None:
    lifecycle, problems = check_spec(default_spec_path())
    assert problems == []
    assert lifecycle is not None


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        (
            'guards = ["due", "before_deadline"]',
            'guards = ["due", "befor_deadline"]',
            "events.lease.transitions[0].guards",
            "unknown guard 'befor_deadline'",
        ),
        (
            'effects = ["bump_attempt", "start_attempt", "enforce_kind_policy"]',
            'effects = ["bump_attempts", "start_attempt", "enforce_kind_policy"]',
            "events.start.transitions[0].effects",
            "unknown effect 'bump_attempts'",
        ),
        ('to = "running"', 'to = "runing"', "events.start.transitions[0].to", "unknown state"),
        ('initial = "queued"', 'initial = "pending"', "machine.initial", "not a declared state"),
        (
            '[states.investigate]\ndoc = "Parked: the outside effect of a run is unknown; '
            'an operator decides."\nparked = true',
            '[states.investigate]\ndoc = "Parked."\nparked = true\n[states.limbo]\ndoc = "x"',
            "states.limbo",
            "unreachable",
        ),
        (
            "[events.requeue]\ndoc",
            "[events.requeue]\nfenced = 3\ndoc",
            "events.requeue.fenced",
            "true or false",
        ),
        (
            "[events.requeue]\n",
            "[events.requeue]\ncolour = 'red'\n",
            "events.requeue.colour",
            "unknown key",
        ),
    ],
)
def test_a_broken_spec_names_the_file_and_the_offending_key(
    tmp_path: Path, old: str, new: str, key: str, problem: str
) -> None:
    path = broken(tmp_path, old, new)
    _, problems = check_spec(path)
    assert any(p.key == key and problem in p.problem for p in problems), problems
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)


def test_a_non_operator_event_on_a_terminal_state_is_refused(tmp_path: Path) -> None:
    path = broken(
        tmp_path,
        'from = ["queued", "leased", "running", "retry_wait", "cancelling"]\nto = "failed"',
        'from = ["queued", "leased", "running", "retry_wait", "cancelling", "succeeded"]\n'
        'to = "failed"',
    )
    _, problems = check_spec(path)
    assert any(
        p.key == "events.deadline" and "terminal state 'succeeded'" in p.problem for p in problems
    )


def test_two_transitions_with_the_same_guards_are_refused(tmp_path: Path) -> None:
    path = broken(
        tmp_path,
        '[[events.resolve.transitions]]\nfrom = ["investigate"]\nto = "failed"\n'
        'guards = ["outcome_failed"]',
        '[[events.resolve.transitions]]\nfrom = ["investigate"]\nto = "failed"\n'
        'guards = ["outcome_succeeded"]',
    )
    _, problems = check_spec(path)
    assert any("same guards" in p.problem for p in problems), problems


def test_an_unguarded_transition_that_hides_later_ones_is_refused(tmp_path: Path) -> None:
    path = broken(
        tmp_path,
        'to = "retry_wait"\nguards = ["retryable", "attempts_left", "retry_before_deadline"]',
        'to = "retry_wait"',
    )
    _, problems = check_spec(path)
    assert any("hides the ones after it" in p.problem for p in problems), problems


def test_a_state_that_cannot_finish_is_refused(tmp_path: Path) -> None:
    # Leave `leased` reachable (by lease) but take away every event out of it.
    text = GOOD.replace('from = ["leased"]\n', 'from = ["running"]\n')
    text = text.replace('from = ["queued", "retry_wait", "leased"]', 'from = ["queued"]')
    text = text.replace(
        'from = ["queued", "leased", "running", "retry_wait", "cancelling"]',
        'from = ["queued", "running", "retry_wait", "cancelling"]',
    )
    text = text.replace('from = ["leased", "running", "cancelling"]', 'from = ["running"]')
    path = tmp_path / "job.toml"
    path.write_text(text, encoding="utf-8")
    _, problems = check_spec(path)
    assert any(p.key == "states.leased" and "cannot reach" in p.problem for p in problems), problems


def test_a_toml_syntax_error_is_named(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("[machine\nname = 1", encoding="utf-8")
    _, problems = check_spec(path)
    assert problems[0].key == "(syntax)"
    assert str(path) in str(problems[0])


def test_spec_check_command_exits_non_zero_and_lists_problems(tmp_path: Path) -> None:
    path = broken(tmp_path, 'to = "running"', 'to = "runing"')
    done = subprocess.run(
        [sys.executable, "-c", "from fsm.cli import main; main()", "spec", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "events.start.transitions[0].to" in done.stderr
    ok = subprocess.run(
        [sys.executable, "-c", "from fsm.cli import main; main()", "spec", "check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0
    assert "11 states, 20 events" in ok.stdout


def test_a_state_or_event_name_that_is_not_an_identifier_is_refused(tmp_path: Path) -> None:
    # given a spec whose state name would reach SQL and diagrams with a quote in it
    text = default_spec_path().read_text(encoding="utf-8")
    broken = text.replace("[states.investigate]", '[states."investigate\'x"]')
    path = tmp_path / "job.toml"
    path.write_text(broken, encoding="utf-8")
    # when it is checked
    lc, errors = check_spec(path)
    # then it is refused, naming the key
    assert lc is None
    assert any("lower-case identifier" in str(e) for e in errors)
