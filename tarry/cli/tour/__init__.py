"""The tour: what `tarry dev` shows a person with no API key (README, "Five minutes with
the CLI"; docs/getting-started.md).

`tour-script.json` is a script file like any `tarry scripted-model --script` reads: the
offline model plays its conversation when a run opens with the tour's prompt, and echoes
everything else. `workspace/` holds the files a new run's workspace starts with under
`tarry dev` (and the demo, which plays the same conversation), so the agent has notes
to read.
"""

from __future__ import annotations

from pathlib import Path

from tarry.testing.script import Conversation, Script

HERE = Path(__file__).resolve().parent
SCRIPT_FILE = HERE / "tour-script.json"
WORKSPACE = HERE / "workspace"
"""The template of a new run's workspace under `tarry dev`."""


def script() -> Script:
    """The tour's script file, as the offline model plays it."""
    return Script.from_json(SCRIPT_FILE.read_text(encoding="utf-8"))


def conversation() -> Conversation:
    """The tour's one conversation: list and read the notes, ask, write (a gated call
    in the tour), finish."""
    (only,) = script().conversations
    return only
