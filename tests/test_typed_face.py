"""The public face is typed: `tarry` ships `py.typed`, so `mypy --strict` checks
a user's script against what `tarry` exports, as it checks this project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deadline import deadline

USER_SCRIPT = """\
import asyncio

from tarry import (
    EncryptionKeyError,
    ErrorCode,
    EventKind,
    Phase,
    RunHandle,
    RunInput,
    RunState,
    Tarry,
    TarryError,
)


async def follow(run: RunHandle) -> None:
    async for event in run.events():
        if event.kind is EventKind.TEXT and event.text:
            print(event.text, end="")
        if event.kind is EventKind.STOP:
            return


async def main() -> None:
    try:
        tarry = await Tarry.connect()
    except EncryptionKeyError as e:
        raise SystemExit(str(e)) from None
    run = await tarry.start(RunInput(prompt="Tidy up notes.md", tools=["read_file"]))
    await follow(run)
    state: RunState = await run.wait_for({Phase.WAITING_USER})
    print("agent:", state.last_assistant_text)
    try:
        state = await run.send("Keep the headings", id="msg-1")
    except TarryError as e:
        if e.code is not ErrorCode.RUN_ENDED:
            raise
    await run.stop("done for today")
    result = await run.result()
    print(result.phase, len(await run.transcript()), "messages")


asyncio.run(main())
"""

MISUSE = """\
from tarry import RunHandle


async def misuse(run: RunHandle) -> int:
    return await run.state()
"""
"""A script that uses the face wrongly: mypy must see `tarry`'s types to refuse it."""


def test_a_user_script_that_imports_only_the_public_face_passes_mypy_strict(
    tmp_path: Path,
) -> None:
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "misuse.py").write_text(MISUSE)

    # Run from outside the repository, so `tarry` is found as installed, as a user's is.
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "user.py", "misuse.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=deadline(240),
    )

    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[0] for line in errors] == ["misuse.py"], checked.stdout
    assert '"RunState"' in errors[0], errors
