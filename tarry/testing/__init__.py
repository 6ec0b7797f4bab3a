"""Testing your agent, like `temporalio.testing` tests workflows: `ScriptedAgent` serves
your tools and settings on a worker, on a real Temporal dev server (`start_dev_server`),
with every model call answered by the scripted model (`ScriptedModel`, scripted with
`say`, `call`, `calls` and `fail`), which speaks OpenAI's `chat.completions` and
Anthropic's Messages API from the same scripts (`script`). `tarry.testing.fixtures` is
the pytest plugin of it (docs/guides/testing.md).

Needs the `testing` extra (`pip install 'tarry[testing]'`). It starts workers, so it
sits on the floor above `workers`, below `tarry.cli` (whose `tarry dev` plays the
scripted model); nothing a worker or a client imports imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry._lazy import lazy_face

if TYPE_CHECKING:
    from tarry.testing._agent import ScriptedAgent, StartAgent, StopWorker, start_dev_server
    from tarry.testing.script import ScriptedToolCall, ScriptStep, call, calls, fail, say
    from tarry.testing.scripted_model import ScriptedModel

__all__ = [
    "ScriptStep",
    "ScriptedAgent",
    "ScriptedModel",
    "ScriptedToolCall",
    "StartAgent",
    "StopWorker",
    "call",
    "calls",
    "fail",
    "say",
    "start_dev_server",
]

_HOMES = {
    "tarry.testing._agent": ("ScriptedAgent", "StartAgent", "StopWorker", "start_dev_server"),
    "tarry.testing.script": ("ScriptStep", "ScriptedToolCall", "call", "calls", "fail", "say"),
    "tarry.testing.scripted_model": ("ScriptedModel",),
}

if not TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    # Each name's module is imported on the name's first use: `tarry scripted-model`
    # loads the scripted model without the worker that `ScriptedAgent` starts.
    __getattr__ = lazy_face(__name__, _HOMES)
