"""Reason codes live in the spec: `jobfsm spec check` refuses a transition without a
declared one, and the docs table lists exactly the spec's codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm.display.diagram import render_codes
from fsm.lifecycle.codes import CODE_RULES
from fsm.lifecycle.spec import check_spec, lifecycle

from .test_spec_check import broken


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        (
            'code = "leased"',
            'code = "lesaed"',
            "events.lease.transitions[0].code",
            "'lesaed' is not declared in [codes]",
        ),
        (
            'code = "leased"',
            "",
            "events.lease.transitions[0]",
            "needs exactly one of code or code_rule",
        ),
        (
            'code_rule = "fail_retry_cause"',
            'code_rule = "fail_retry_reason"',
            "events.fail.transitions[0].code_rule",
            "unknown code rule 'fail_retry_reason'",
        ),
        (
            'handler_error = "The handler raised a retryable error; it retries after the backoff."',
            "",
            "events.fail.transitions[0].code_rule",
            "'fail_retry_cause' can give 'handler_error', not declared in [codes]",
        ),
        (
            'stale_fence = "A report from an owner whose fence is no longer current was rejected."',
            "",
            "codes",
            "must declare 'stale_fence'",
        ),
    ],
)
def test_spec_check_names_a_missing_or_undeclared_reason_code(
    tmp_path: Path, old: str, new: str, key: str, problem: str
) -> None:
    _, problems = check_spec(broken(tmp_path, old, new))

    assert any(p.key == key and problem in p.problem for p in problems), problems


def test_every_code_a_rule_can_give_is_declared_and_every_audited_rule_has_codes() -> None:
    lc = lifecycle()
    for name, (_, given) in CODE_RULES.items():
        assert set(given) <= set(lc.codes), name
    for rule in lc.rules:
        audited = lc.events[rule.event].audited
        assert bool(rule.codes()) == audited, rule


def test_the_docs_table_lists_every_code_of_the_spec_once() -> None:
    table = render_codes(lifecycle())

    rows = [line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]]

    assert rows == list(lifecycle().codes)
