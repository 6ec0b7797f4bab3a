"""The processes Tarry starts beside itself: the Temporal dev server and worker processes.

`DevServer` is the one lifecycle of `temporal server start-dev`: `tarry dev` (the dev
stack), the fault tests and the benchmarks all start, stop and restart it here.
`WorkerProcess` is a worker as a process of its own, configured from the environment
like `python -m workers`, for tests and benchmarks that kill or measure it.

Each runs in a session of its own: a Ctrl-C in the terminal reaches only the process
that started it, which stops them in order, and stopping one reaches whatever it
spawned. Their output goes to a log file, never to a pipe nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import signal
import socket
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from temporalio.client import Client

from tarry.temporal.servers import dev_server_args, find_binary, search_attribute_specs

__all__ = ["HOST", "PORTS", "DevServer", "DevServerError", "WorkerProcess", "free_port"]

HOST = "127.0.0.1"
READY_TIMEOUT = 60.0
"""Seconds a fresh dev server may take to answer; the first start creates the database."""
STOP_TIMEOUT = 15.0
"""Seconds a process gets to stop after SIGTERM before it is killed."""
LOG_HEADER = "--- start: "
"""Begins the line each start writes to the log, which outlives restarts."""


class DevServerError(Exception):
    """The dev server did not come up; the message is one line and names its log."""


PORTS = range(20_000, 32_000)
"""Where `free_port` picks: below the kernel's ephemeral range (Linux: 32768-60999),
where the operating system hands out ports to outgoing connections. A port from that
range (what binding to port 0 gives) can be taken by any client's connection before the
server binds it, and the server then fails with "address already in use"."""


def free_port(avoid: Collection[int | None] = ()) -> int:
    """A port of `PORTS` nothing listens on right now, for a server started next, and
    none of `avoid`: the ports picked for servers that have not bound theirs yet.

    Nothing holds it until that server binds it: processes that pick at the same time
    need ranges of their own (the test suite gives each of its workers one)."""
    while True:
        port = random.choice(PORTS)
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port


async def _end(process: asyncio.subprocess.Process, sig: int, timeout: float) -> None:  # noqa: ASYNC109
    """Sends `sig` to the process group we started, then SIGKILL if it lingers."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # it may have exited just now
            os.killpg(process.pid, sig)
        try:
            async with asyncio.timeout(timeout):
                await process.wait()
                return
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def _read_from(path: Path, offset: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read()


async def _spawn(
    command: Sequence[str],
    log: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[asyncio.subprocess.Process, int]:
    """Starts `command` in a session of its own, its output appended to `log` after a
    header line; returns the process and where its output begins in the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"{LOG_HEADER}{shlex.join(command)}\n".encode())
        out.flush()
        offset = out.tell()
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )
    return process, offset


class DevServer:
    """`temporal server start-dev` on a SQLite file, on ports fixed for its lifetime, so
    it can be stopped (SIGTERM, or SIGKILL as a crash) and started again where clients
    and workers expect it, with every run it held."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        namespace: str = "default",
        extra_args: Sequence[str] | None = None,
    ) -> None:
        """`port` None: a free one; `ui_port` None: no Web UI. `extra_args` go to
        `start-dev` instead of the low-latency dynamic config (`dev_server_args()`)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.db = data_dir / "temporal.db"
        self.log = data_dir / "temporal.log"
        # Each picked apart from the others: none is bound until the server starts.
        self.port = port or free_port(avoid=[ui_port])
        self.ui_port = ui_port
        self.namespace = namespace
        self.extra_args = dev_server_args() if extra_args is None else list(extra_args)
        self._http_port = free_port(avoid=[self.port, ui_port])
        self._metrics_port = free_port(avoid=[self.port, ui_port, self._http_port])
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self) -> list[str]:
        """Raises `DevServerError` when there is no `temporal` binary."""
        try:
            binary = find_binary("temporal")
        except FileNotFoundError as e:
            raise DevServerError(str(e)) from None
        ui = ["--headless"] if self.ui_port is None else ["--ui-port", str(self.ui_port)]
        attributes = [a for spec in search_attribute_specs() for a in ("--search-attribute", spec)]
        return [
            str(binary), "server", "start-dev",
            "--ip", HOST,
            "--port", str(self.port),
            "--http-port", str(self._http_port),
            "--metrics-port", str(self._metrics_port),
            *ui,
            "--db-filename", str(self.db),
            "--namespace", self.namespace,
            *attributes,
            "--log-level", "warn",
            *self.extra_args,
        ]  # fmt: skip

    async def start(self, timeout: float = READY_TIMEOUT) -> None:  # noqa: ASYNC109
        """Starts the server and returns once it answers RPCs; `DevServerError` when it
        exits first or stays silent past `timeout` (it is left running: `stop()` it)."""
        self.process, _ = await _spawn(self.command(), self.log)
        process = self.process
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if process.returncode is not None:
                raise DevServerError(
                    f"the Temporal dev server exited ({self.last_line()}); its log is {self.log}"
                )
            try:
                async with asyncio.timeout(2.0):
                    client = await Client.connect(self.address, namespace=self.namespace)
                    await client.count_workflows()
                return
            except Exception:  # not up yet: refused, or not serving yet
                if loop.time() > deadline:
                    raise DevServerError(
                        f"the Temporal dev server did not answer within {timeout:.0f}s; "
                        f"its log is {self.log}"
                    ) from None
                await asyncio.sleep(0.1)

    def last_line(self) -> str:
        """The last line the server wrote since its latest start: usually why it stopped."""
        latest = self.log.read_text(errors="replace").rpartition(LOG_HEADER)[2]
        lines = latest.strip().splitlines()[1:]  # the first is the header's command line
        return lines[-1].strip() if lines else "no output"

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM lets it shut down; SIGKILL is a crash. Waits until it is gone."""
        if self.process is not None:
            await _end(self.process, sig, timeout=STOP_TIMEOUT)

    async def restart(self, sig: int = signal.SIGTERM) -> None:
        await self.stop(sig)
        await self.start()

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


async def _wait_for_line(
    process: asyncio.subprocess.Process,
    log: Path,
    offset: int,
    marker: bytes,
    timeout: float,  # noqa: ASYNC109
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while marker not in _read_from(log, offset):
        if process.returncode is not None:
            tail = _read_from(log, offset).decode(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"process exited ({process.returncode}): " + " | ".join(tail))
        if loop.time() > deadline:
            raise TimeoutError(f"no {marker.decode()!r} in {log} within {timeout:g}s")
        await asyncio.sleep(0.05)


class WorkerProcess:
    """`python -m <module>` (a Tarry worker: `workers` unless told otherwise) as a process
    of its own, configured from the environment like `python -m workers`."""

    def __init__(
        self,
        *,
        address: str,
        task_queue: str,
        model_url: str,
        workspace_root: Path,
        log: Path,
        api_key: str = "sk-tarry-worker-process",
        module: str = "workers",
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """`cwd`: where `module` is found (None: this process's working directory)."""
        self.address = address
        self.task_queue = task_queue
        self.model_url = model_url
        self.workspace_root = workspace_root
        self.log = log
        self.api_key = api_key
        self.module = module
        self.cwd = cwd
        self.extra_env = dict(extra_env or {})
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Starts the worker and returns once it says `worker ready`."""
        env = {
            "PATH": os.environ.get("PATH", ""),
            "TEMPORAL_ADDRESS": self.address,
            "TARRY_TASK_QUEUE": self.task_queue,
            "OPENAI_BASE_URL": self.model_url,
            "OPENAI_API_KEY": self.api_key,
            "TARRY_MODEL": "test-model",
            "TARRY_WORKSPACE_ROOT": str(self.workspace_root),
            # Every worker of the deployment shares one store, as production ones must.
            "TARRY_STORAGE_DIR": str(self.workspace_root.parent / "payloads"),
            **self.extra_env,
        }
        command = [sys.executable, "-m", self.module]
        self.process, offset = await _spawn(command, self.log, cwd=self.cwd, env=env)
        self.starts += 1
        await _wait_for_line(self.process, self.log, offset, b"worker ready", timeout)

    async def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, without a word to the server."""
        if self.process is not None:
            await _end(self.process, signal.SIGKILL, timeout=10.0)

    async def stop(self) -> None:
        if self.process is not None:
            await _end(self.process, signal.SIGTERM, timeout=10.0)
