"""The demo, the project's main job, run as a person runs it: a process with no
terminal and nothing on stdin, on free ports and a fresh data directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tarry.cli.demo import PROMPT, SCRIPT, SCRIPTED_REPLY
from tarry.testing.scripted_model import ScriptedModel, say
from tests.conftest import CANARY_KEY
from tests.deadline import deadline
from tests.test_devstack import (
    STARTUP_TIMEOUT,
    Ports,
    assert_nothing_left,
    children,
    interrupt,
    read_until,
    run_python,
    serving,
    stack_env,
)

RUN_DEMO = (
    "import sys; from pathlib import Path; from tarry.temporal.entrypoint import run_main; "
    "from tarry.cli.demo import run_demo; from tarry.config.settings import TarrySettings; "
    "run_main(lambda: run_demo(TarrySettings(), Path(sys.argv[1]), "
    "keep=sys.argv[2] == 'keep', reply=sys.argv[3] or None, model=sys.argv[4]))"
)


async def demo(
    ports: Ports,
    data_dir: Path,
    tmp_path: Path,
    *,
    reply: str = "",
    model: str = "default",
    **env: str,
) -> tuple[int, str]:
    """Runs the demo to its end; its exit code and standard output."""
    process = await run_python(
        RUN_DEMO, str(data_dir), "", reply, model,
        env=stack_env(ports, **env),
        stderr=tmp_path / "demo.stderr",
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), STARTUP_TIMEOUT + deadline(60))
    assert process.returncode is not None
    return process.returncode, out.decode()


def run_id_in(out: str) -> str:
    found = re.search(r"Completed run (demo-[0-9a-f]{8})", out)
    assert found, out
    return found.group(1)


def in_order(out: str, *parts: str) -> bool:
    positions = [out.find(part) for part in parts]
    return -1 not in positions and positions == sorted(positions)


@pytest.mark.parametrize("model", ["default", "anthropic"])
async def test_the_demo_runs_a_human_in_the_loop_run_end_to_end_offline(
    tmp_path: Path, model: str
) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    code, out = await demo(ports, data_dir, tmp_path, model=model)

    assert code == 0, out + (tmp_path / "demo.stderr").read_text()
    run_id = run_id_in(out)
    assert in_order(
        out,
        "offline scripted model",
        "you: Turn the action items",
        "→ list_files()",
        '→ read_file(path="notes.md")',
        "Who should take it?",
        f"you: {SCRIPTED_REPLY}",
        '→ write_file(path="actions.md"',
        "→ finish(",
        f"Completed run {run_id}",
        f"http://127.0.0.1:{ports.ui}/namespaces/default/workflows/{run_id}",
    ), out
    assert out.strip().splitlines()[-1] == "Demo finished."
    assert "sdk_core" not in out, "core's logs go to Python logging (workers.telemetry)"
    # The human's reply is printed once: as it is sent, not again from the transcript.
    assert out.count(SCRIPTED_REPLY) == 1
    assert "thinking" not in out, "no spinner when the output is not a terminal"
    actions = (data_dir / "workspaces" / run_id / "actions.md").read_text()
    assert "Write the Q3 launch blog post (Priya)" in actions
    await assert_nothing_left(ports, data_dir, set())


async def test_in_a_terminal_the_demo_shows_a_thinking_spinner(tmp_path: Path) -> None:
    ports = Ports()
    terminal = pexpect.spawn(
        sys.executable,
        ["-c", RUN_DEMO, str(tmp_path / "data"), "", "", "default"],
        env=stack_env(ports),
        encoding="utf-8",
        dimensions=(40, 120),
        timeout=STARTUP_TIMEOUT,
    )
    try:
        # Drawn with the first message printed while the run works (the prompt, at once).
        await terminal.expect_exact("thinking…", async_=True)
        await terminal.expect_exact("Completed", async_=True)
        await terminal.expect_exact(pexpect.EOF, async_=True)
    finally:
        terminal.close(force=True)
    assert terminal.exitstatus == 0


async def test_with_a_configured_model_the_demo_sends_the_given_reply(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    # An OpenAI-compatible server standing in for a real model: the demo must treat
    # it as configured (no script of its own) and take the reply from --reply.
    async with ScriptedModel(SCRIPT) as model:
        base_url = model.base_url
        code, out = await demo(
            ports, data_dir, tmp_path,
            reply="Sam can take it.",
            OPENAI_BASE_URL=base_url,
            OPENAI_API_KEY=CANARY_KEY,
        )  # fmt: skip

    assert code == 0, out + (tmp_path / "demo.stderr").read_text()
    assert f"gpt-4o-mini at {base_url}" in out
    assert "you: Sam can take it." in out
    first, *_, after_reply = [r.body["messages"] for r in model.requests[:4]]
    assert first[-1] == {"role": "user", "content": PROMPT}
    assert after_reply[-1] == {"role": "user", "content": "Sam can take it."}
    assert model.remaining == 0
    run_id_in(out)


async def test_a_model_that_never_finishes_ends_the_demo_with_exit_1_saying_why(
    tmp_path: Path,
) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    # A real model that answers in text and never calls `finish`, its first answer cut
    # at its length limit: the reply is used up and the demo must not claim success.
    script = [say("Who should own the blog", finish_reason="length"), say("Anything else?")]
    async with ScriptedModel(script) as model:
        code, out = await demo(
            ports, data_dir, tmp_path,
            reply="Priya.",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY=CANARY_KEY,
        )  # fmt: skip

    assert code == 1, out
    assert "warning: LLM_TRUNCATED" in out
    assert out.strip().splitlines()[-1].startswith("Demo not finished: the agent asked again")


async def test_with_a_configured_model_and_no_reply_the_human_types_it(tmp_path: Path) -> None:
    ports = Ports()
    async with ScriptedModel(SCRIPT) as model:
        terminal = pexpect.spawn(
            sys.executable,
            ["-c", RUN_DEMO, str(tmp_path / "data"), "", "", "default"],
            env=stack_env(ports, OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY=CANARY_KEY),
            encoding="utf-8",
            dimensions=(40, 120),
            timeout=STARTUP_TIMEOUT,
        )
        try:
            await terminal.expect_exact("Who should take it?", async_=True)
            await terminal.expect_exact("your reply> ", async_=True)
            terminal.sendline("Ana can do it.")
            await terminal.expect_exact("Completed", async_=True)
            await terminal.expect_exact(pexpect.EOF, async_=True)
        finally:
            terminal.close(force=True)

    assert terminal.exitstatus == 0
    assert model.requests[3].body["messages"][-1] == {"role": "user", "content": "Ana can do it."}


async def test_with_keep_the_stack_stays_up_until_ctrl_c(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    stderr = tmp_path / "demo.stderr"
    process = await run_python(
        RUN_DEMO, str(data_dir), "keep", "", "default", env=stack_env(ports), stderr=stderr
    )  # fmt: skip
    try:
        lines = await read_until(process, "stays up", stderr)
        pids = children(process.pid)
        assert pids
        assert await interrupt(process) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    run_id_in("\n".join(lines))
    await assert_nothing_left(ports, data_dir, pids)


async def test_the_demo_beside_a_running_dev_stack_keeps_its_run_to_itself(
    tmp_path: Path,
) -> None:
    # `tarry dev` already serves the shared task queue with its echo model; had the demo
    # used that queue, the dev worker would answer some of the demo's model calls.
    ports = Ports()
    async with serving(ports, tmp_path / "dev", tmp_path) as dev:
        code, out = await demo(ports, tmp_path / "demo", tmp_path)
        assert await interrupt(dev.process) == 0

    assert code == 0, out + (tmp_path / "demo.stderr").read_text()
    assert "reused" in out
    assert "(offline scripted model) You said" not in out
    run_id_in(out)


ROOT = Path(__file__).resolve().parent.parent
MOST_PACKAGES = 60
"""What `scripts/demo` may install on a fresh clone: the `cli` extra is about 50, where
the `dev` extra, which it installed before, is over 200 (1.4 GB)."""


def fresh_clone(where: Path) -> Path:
    """The project's tracked files, as `git clone` gives them, without a `.venv`."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, where / name)
    return where


def test_the_demo_on_a_fresh_clone_installs_at_most_60_packages(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "tarry")
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_EXTRAS", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env["PYTHON"] = sys.executable  # a Python >= 3.11, as the demo asks of a person

    setup = subprocess.run(
        [clone / "scripts" / "demo", "--help"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=deadline(600), check=False,
    )  # fmt: skip
    listed = subprocess.run(
        [clone / ".venv" / "bin" / "python", "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip

    assert setup.returncode == 0, setup.stderr
    assert "installing Tarry with its [cli] extra" in setup.stderr
    assert len(json.loads(listed.stdout)) <= MOST_PACKAGES
