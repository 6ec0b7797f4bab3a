"""The tour: what `tarry dev` shows a person with no API key (README, "Five minutes with
the CLI"; docs/getting-started.md).

`tour-script.json` is a script file like any `tarry scripted-model --script` reads: the
offline model plays its conversation when a run opens with the tour's prompt, and echoes
everything else. `workspace/` holds the files a new run's workspace starts with under
`tarry dev` (and the demo, which plays the same conversation), so the agent has notes
to read.

The guides' tours (`TOURS`: approvers, rules, sub-agents, forking, interrupting,
guardrails, daily caps, OAuth), each played with `tarry dev --tour NAME`, are script files
beside it, `NAME.json`; a tour that needs the workers' config (the teams tour's sub-agent,
the guardrails tour's guardrails, the caps tour's `[limits]`) has its `NAME.toml` too. The
OAuth tour's config names servers it starts itself, on ports known once they listen:
`tarry.cli.oauth_tour` writes it. The A2A tour is two stacks: the remote one serves
`a2a.toml`'s researcher; the lead's (`--remote CARD`) has a config written naming that
card (`remote_config`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tarry.testing.script import Conversation, Script

HERE = Path(__file__).resolve().parent
SCRIPT_FILE = HERE / "tour-script.json"
WORKSPACE = HERE / "workspace"
"""The template of a new run's workspace under `tarry dev`."""


TOURS = {
    "approvers": "docs/guides/people.md",
    "rules": "docs/guides/approvals.md",
    "teams": "docs/guides/teams.md",
    "fork": "docs/guides/forking.md",
    "interrupt": "docs/guides/replies.md",
    "guardrails": "docs/guides/guardrails.md",
    "caps": "docs/guides/budgets.md",
    "oauth": "docs/guides/acting-as-a-person.md",
    "a2a": "docs/guides/a2a.md",
}
"""The guides' tours, each the offline model's with `tarry dev --tour NAME`, and the
guide whose "Try it offline" section gives its commands."""


def line(name: str, *, played: bool) -> str:
    """`tarry dev`'s line of where the guide's tour `name` is told, or why it is not
    played: only the offline model plays scripts."""
    if not played:
        return f"Tour       {name}: not played, a model is configured (unset OPENAI_*)"
    return f"Tour       {name}: {TOURS[name]}, 'Try it offline'"


def script(name: str | None = None) -> Script:
    """The tour's script file, as the offline model plays it; with a guide's tour
    `name`, that tour's conversations too."""
    played = Script.from_json(SCRIPT_FILE.read_text(encoding="utf-8"))
    if name is not None:
        guide = Script.from_json((HERE / f"{name}.json").read_text(encoding="utf-8"))
        played.conversations += guide.conversations
    return played


def config(name: str) -> Path | None:
    """The config file (`TARRY_CONFIG`) the guide's tour `name` needs, if any."""
    path = HERE / f"{name}.toml"
    return path if path.is_file() else None


def remote_config(card: str, data_dir: Path) -> Path:
    """The lead stack's config of the A2A tour, written into its data directory: its
    `researcher` is the remote agent whose card is at `card` (`tarry dev --remote`)."""
    path = data_dir.resolve() / "a2a-tour.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# The A2A tour's lead (`tarry dev --tour a2a --remote CARD`): written by tarry dev.\n"
        "[agents.researcher]\n"
        'description = "Finds facts in the team\'s files, on another stack, over A2A."\n'
        f"a2a = {json.dumps(card)}\n",
        encoding="utf-8",
    )
    return path


def conversation() -> Conversation:
    """The tour's one conversation: list and read the notes, ask, write (a gated call
    in the tour), finish."""
    (only,) = script().conversations
    return only
