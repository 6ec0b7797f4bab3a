"""The evaluating guide's offline trial, played as a person plays it: `tarry dev`, then
the section's commands one by one, read from the guide itself, on the tour's runs."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.test_tour import ROOT, _command, run_command, shell_commands, tarry_dev

GUIDE = ROOT / "docs" / "guides" / "evaluating.md"
SECTION = "## Try it offline"


@dataclass(frozen=True)
class Trial:
    outputs: dict[str, str]
    """What each command printed, by the command."""
    exported: list[dict[str, Any]]
    """`trial.jsonl`: the dataset's points as the export wrote them."""


def trial_commands() -> tuple[list[str], list[str]]:
    """The section's two blocks: the stack's terminal, and the trial's commands."""
    section = GUIDE.read_text().split(SECTION, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    stack, commands = shell_commands(section)
    return stack, commands


@pytest.fixture(scope="module")
async def played(tmp_path_factory: pytest.TempPathFactory) -> Trial:
    home = tmp_path_factory.mktemp("trial")
    stack, commands = trial_commands()
    assert [_command(line) for line in stack] == ["tarry dev"]
    async with tarry_dev(home, Path(sys.executable).parent, stack[0]) as dev:
        outputs = {c: await run_command(c, dev.env, home) for c in commands}
    lines = (home / "trial.jsonl").read_text().splitlines()
    return Trial(outputs, [json.loads(line) for line in lines])


def output_of(trial: Trial, starting: str) -> str:
    (found,) = [o for c, o in trial.outputs.items() if c.startswith(starting)]
    return found


def verdicts(trial: Trial) -> list[tuple[str, str]]:
    """(what was proposed, the label's verdict) of each exported point, sorted."""
    return sorted(
        (
            p["proposal"]["function"]["name"] if p.get("proposal") else "answer",
            p["label"]["verdict"],
        )
        for p in trial.exported
    )


async def test_the_trial_s_dataset_holds_the_approved_and_the_rejected_write(
    played: Trial,
) -> None:
    assert verdicts(played) == [
        ("answer", "answered"),
        ("answer", "answered"),
        ("write_file", "approved"),
        ("write_file", "rejected"),
    ]


async def test_the_offline_candidate_agrees_with_the_approval_and_not_the_rejection(
    played: Trial,
) -> None:
    report = output_of(played, "tarry eval trial")

    assert "agreement 0.75 [0.30, 0.95] (3/4)" in report
    assert "Disagreements (1)" in report
    assert re.search(r"rejected by \S+ \(not yet\)", " ".join(report.split()))


async def test_exported_messages_carry_an_empty_decision_and_interrupted_as_the_guide_says(
    played: Trial,
) -> None:
    messages = [m for point in played.exported for m in point["messages"]]

    assert messages
    assert {(m["decision"], m["interrupted"]) for m in messages} == {(None, False)}
    assert "`decision` is `null`" in GUIDE.read_text()
