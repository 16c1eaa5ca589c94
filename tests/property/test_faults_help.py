"""`jobfsm faults --help` names every fault model it can run.

The help text lists the models by hand (the CLI does not import the fault suite to
print its help); this holds that list to the registry, `fsm.testing.faults.MODELS`.
"""

from __future__ import annotations

import re

from click.testing import CliRunner

from fsm.cli import cli
from fsm.testing.faults import MODELS


def test_the_model_option_names_every_registered_model_and_nothing_else() -> None:
    result = CliRunner().invoke(cli, ["faults", "--help"], terminal_width=10_000)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    found = re.search(r"Run only this fault model \(repeatable\): (.*?); delivery", text)
    assert found, text
    listed = [name.strip() for name in found.group(1).split(",")]
    assert listed == ["machine", *(m.name for m in MODELS)]
