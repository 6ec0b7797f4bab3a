"""Python scripts that use the client, run as a user runs them: `python script.py`, its
own process, against the test server, served by the test's in-process worker."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.cli import Result, agent_env
from tests.conftest import Agent
from tests.deadline import deadline

PYTHON_GUIDE = Path(__file__).parent.parent / "docs" / "guides" / "python.md"

PLAIN_SCRIPT = """
import asyncio

from tarry.client import Tarry
from tarry.contracts import Phase


async def main() -> None:
    tarry = await Tarry.connect()
    run = await tarry.start("hello")
    state = await run.wait_for({Phase.WAITING_USER})
    print(state.phase)


asyncio.run(main())
"""


def python_guide_example() -> str:
    """The one Python block of the Python client's guide."""
    blocks = re.findall(r"```python\n(.*?)```", PYTHON_GUIDE.read_text(), re.DOTALL)
    assert len(blocks) == 1, blocks
    return str(blocks[0])


async def run_script(agent: Agent, script: Path) -> Result:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        env=agent_env(agent),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=deadline(60))
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


async def test_a_plain_client_script_exits_0_every_time(agent: Agent, tmp_path: Path) -> None:
    """sdk-python #300 aborted 5 to 7 of 20 such runs at interpreter exit (134, 139)."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT)
    agent.model.add(*(say(f"Hello {i}!") for i in range(20)))

    results = [await run_script(agent, script) for _ in range(20)]

    print("exit codes:", [r.code for r in results])
    assert [(r.code, r.out, r.err) for r in results] == [(0, "WaitingUser\n", "")] * 20


async def test_the_python_guide_example_runs_as_a_script(agent: Agent, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(python_guide_example())
    agent.model.add(say("Which headings?"), say("Kept them."))

    result = await run_script(agent, script)

    assert (result.code, result.err) == (0, ""), result
    assert result.out.splitlines() == [
        "agent: Which headings?",
        "agent: Kept them.",
        f"{Phase.COMPLETED} 4 messages",
    ]
