"""`tarry dev` (`serve_dev`) as a person meets it: a process started from a shell with
free ports and a data directory, stopped with Ctrl-C, started again."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tarry.cli.processes import free_port
from tarry.client import Tarry, TarryError, connect_temporal
from tarry.client.dataset_store import DatasetStore
from tarry.config.settings import TarrySettings
from tarry.contracts import (
    SEARCH_ATTRIBUTES,
    WORKFLOW_TYPE,
    ErrorCode,
    Phase,
    RunInput,
    RunResult,
)
from tarry.temporal.servers import dev_server_args, find_binary
from tarry.testing.scripted_model import ECHO_PREFIX
from tests.deadline import deadline

WAITING = {Phase.WAITING_USER}
STARTUP_TIMEOUT = deadline(90)
STOP_TIMEOUT = deadline(60)

SERVE_DEV = (
    "import sys; from pathlib import Path; from tarry.temporal.entrypoint import run_main; "
    "from tarry.cli.devstack import serve_dev; from tarry.config.settings import TarrySettings; "
    "run_main(lambda: serve_dev(TarrySettings(), Path(sys.argv[1])))"
)


@dataclass
class Ports:
    """A free gRPC port, a free Web UI port and a free API port for one stack, three
    different ones: the stack binds them one after another, its API last."""

    grpc: int = field(default_factory=free_port)
    ui: int = field(init=False)
    api: int = field(init=False)

    def __post_init__(self) -> None:
        self.ui = free_port(avoid=[self.grpc])
        self.api = free_port(avoid=[self.grpc, self.ui])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc}"


def stack_env(ports: Ports, **extra: str) -> dict[str, str]:
    """This environment without a developer's model, Temporal or Tarry settings."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TARRY_", "TEMPORAL_"))
    }
    return (
        env
        | {
            "TEMPORAL_ADDRESS": ports.address,
            "TARRY_UI_PORT": str(ports.ui),
            "TARRY_API_PORT": str(ports.api),
        }
        | extra
    )


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


def children(pid: int) -> set[int]:
    return {
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    }


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (a test's data directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not a process
            continue
        if text in cmdline and proc.name != str(os.getpid()):
            found.append(cmdline)
    return found


async def interrupt(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGINT)
    return await asyncio.wait_for(process.wait(), STOP_TIMEOUT)


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()}


async def assert_nothing_left(ports: Ports, data_dir: Path, pids: set[int]) -> None:
    assert not alive(pids)
    assert not processes_mentioning(str(data_dir))
    assert not await listening(ports.grpc)
    assert not await listening(ports.ui)
    assert not await listening(ports.api)


@dataclass
class Serving:
    process: asyncio.subprocess.Process
    banner: list[str]
    stderr: Path


async def client_of(ports: Ports) -> Client:
    return await connect_temporal(TarrySettings(temporal_address=ports.address))


async def run_python(
    code: str, *args: str, env: dict[str, str], stderr: Path
) -> asyncio.subprocess.Process:
    """`python -c code args...` from a shell: no terminal, nothing on stdin."""
    with stderr.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, *args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )  # fmt: skip


async def read_until(process: asyncio.subprocess.Process, marker: str, stderr: Path) -> list[str]:
    """Standard output lines up to the one containing `marker`; a process that exits
    first fails the test with what it wrote to `stderr`, which says why."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(STARTUP_TIMEOUT):
        while not lines or marker not in lines[-1]:
            line = await process.stdout.readline()
            if not line:
                await process.wait()
                why = await asyncio.to_thread(stderr.read_text, errors="replace")
                code = process.returncode
                raise AssertionError(f"exited {code} before {marker!r}: {lines}\n{why}")
            lines.append(line.decode().rstrip("\n"))
    return lines


@asynccontextmanager
async def serving(
    ports: Ports, data_dir: Path, tmp_path: Path, **extra: str
) -> AsyncIterator[Serving]:
    """`tarry dev` until its banner is out; killed at the end if a test left it running."""
    stderr = tmp_path / "dev.stderr"
    env = stack_env(ports, **extra)
    process = await run_python(SERVE_DEV, str(data_dir), env=env, stderr=stderr)
    try:
        banner = await read_until(process, "Ctrl-C to stop", stderr)
        yield Serving(process, banner, stderr)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_dev_serves_runs_with_the_echo_model_and_stops_cleanly_on_sigint(
    tmp_path: Path,
) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        tarry = Tarry(await client_of(ports))
        state = await (await tarry.start("hello there")).wait_for(WAITING, deadline(30))
        pids = children(dev.process.pid)
        code = await interrupt(dev.process)

    assert state.last_assistant_text == f"{ECHO_PREFIX}hello there"
    assert code == 0, dev.stderr.read_text()
    banner = "\n".join(dev.banner)
    for shown in (ports.address, f"http://127.0.0.1:{ports.ui}", "offline scripted model"):
        assert shown in banner
    assert str(data_dir) in banner
    assert "started here" in banner
    # `tarry doctor`'s report, but for the pollers: the server's version, TLS, attributes.
    assert "\nServer       Temporal 1." in banner
    assert "\nTLS          off" in banner
    assert "\nSearch attrs all of Tarry's are there" in banner
    assert "problem:" not in banner
    # The server's own output goes to its log, not the terminal.
    assert (data_dir / "temporal.log").exists()
    assert (data_dir / "temporal.db").exists()
    assert pids, "the dev server is a child process"
    await assert_nothing_left(ports, data_dir, pids)


async def test_dev_serves_the_http_api_at_the_address_it_prints(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        [line] = [line for line in dev.banner if line.startswith("HTTP API")]
        api = line.split()[2]
        async with httpx.AsyncClient(base_url=api) as http:
            health = await http.get("/healthz")
            started = await http.post("/v1/runs", json={"prompt": "hello api"})
            run = Tarry(await client_of(ports)).get(started.json()["id"])
            state = await run.wait_for(WAITING, deadline(30))
        assert await interrupt(dev.process) == 0

    assert api == f"http://127.0.0.1:{ports.api}"
    assert health.status_code == 200
    assert started.status_code == 201
    assert state.last_assistant_text == f"{ECHO_PREFIX}hello api"
    assert not await listening(ports.api)


async def test_dev_serves_its_workers_metrics_where_it_prints(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    metrics = free_port(avoid=[ports.grpc, ports.ui, ports.api])
    async with serving(ports, data_dir, tmp_path, TARRY_METRICS_PORT=str(metrics)) as dev:
        [line] = [line for line in dev.banner if line.startswith("Metrics")]
        url = line.split()[1]
        tarry = Tarry(await client_of(ports))
        await (await tarry.start("hello metrics")).wait_for(WAITING, deadline(30))
        async with httpx.AsyncClient() as http, asyncio.timeout(deadline(10)):
            while "tarry_model_calls_total{" not in (text := (await http.get(url)).text):
                await asyncio.sleep(0.1)  # exported a moment after the call
        assert await interrupt(dev.process) == 0

    assert url == f"http://127.0.0.1:{metrics}/metrics"
    assert "temporal_activity_execution_latency" in text  # the SDK's own, beside Tarry's


async def test_dev_with_tokens_says_they_are_required_and_which_config_it_loaded(
    tmp_path: Path,
) -> None:
    ports, data_dir, config = Ports(), tmp_path / "data", tmp_path / "tarry.toml"
    config.write_text('[api.users]\nalice = "alice-token-0123456789"\n')
    async with serving(ports, data_dir, tmp_path, TARRY_CONFIG=str(config)) as dev:
        api = f"http://127.0.0.1:{ports.api}"
        async with httpx.AsyncClient(base_url=api) as http:
            docs, runs = await http.get("/docs"), await http.get("/v1/runs")
        assert await interrupt(dev.process) == 0

    assert f"Config     {config}" in dev.banner
    assert (
        f"HTTP API   {api} (tokens required: Authorization: Bearer TOKEN, a token of the"
        f" config file's [api.users]; docs {api}/docs need none)"
    ) in dev.banner
    assert (docs.status_code, runs.status_code) == (200, 401)  # the page a browser opens


async def test_dev_says_it_traces_and_where_the_spans_go(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    collector = f"http://127.0.0.1:{free_port(avoid=[ports.grpc, ports.ui, ports.api])}"
    async with serving(ports, data_dir, tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector) as dev:
        assert await interrupt(dev.process) == 0

    assert f"Tracing    on: OTLP to {collector}, as service tarry-worker" in dev.banner


GETTING_STARTED = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"


def labels(lines: list[str]) -> list[str]:
    """What each banner line is about: its words before the run of spaces."""
    return [re.split(r"\s{2,}", line.strip())[0] for line in lines if line.strip()]


async def test_getting_started_shows_every_line_of_the_banner_tarry_dev_prints(
    tmp_path: Path,
) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        assert await interrupt(dev.process) == 0
    shown = re.search(r"```text\n(Temporal .*?)```", GETTING_STARTED.read_text(), re.DOTALL)
    assert shown is not None

    assert labels(shown.group(1).splitlines()) == labels(dev.banner)
    assert "Tracing    off (OTEL_EXPORTER_OTLP_ENDPOINT=" in shown.group(1)


async def test_dev_logs_an_expected_failure_in_one_line_without_a_traceback(
    tmp_path: Path,
) -> None:
    """A start the client refuses logs nothing; a run that refuses itself (started around
    the client) logs its failed activity in one line."""
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        tarry = Tarry(await client_of(ports))
        with pytest.raises(TarryError) as refused:  # refused before anything starts
            await tarry.start(RunInput(prompt="hi", model="nosuch"), run_id="run-refused")
        with pytest.raises(TarryError) as no_run:
            await tarry.get("run-refused").describe()
        handle = await tarry.client.start_workflow(
            WORKFLOW_TYPE,
            RunInput(prompt="hi", model="nosuch"),
            id="run-nosuch",
            task_queue=tarry.task_queue,
            result_type=RunResult,
        )
        result = await handle.result()
        assert await interrupt(dev.process) == 0

    assert refused.value.code is ErrorCode.LLM_UNKNOWN_PROFILE
    assert no_run.value.code is ErrorCode.RUN_NOT_FOUND
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_UNKNOWN_PROFILE
    log = dev.stderr.read_text()
    failed = [line for line in log.splitlines() if "activity as failed" in line]
    assert len(failed) == 1, log
    assert "LLM_UNKNOWN_PROFILE: no model profile 'nosuch'" in failed[0]
    assert "Traceback" not in log


async def test_a_waiting_run_survives_a_restart_and_takes_a_reply(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        run = await Tarry(await client_of(ports)).start("remember me")
        await run.wait_for(WAITING, deadline(30))
        assert await interrupt(dev.process) == 0

    async with serving(ports, data_dir, tmp_path) as dev:
        again = Tarry(await client_of(ports)).get(run.id)
        before = await again.state()
        after = await again.send("are you still there?")
        assert await interrupt(dev.process) == 0

    assert before.phase is Phase.WAITING_USER
    assert after.phase is Phase.WAITING_USER
    assert after.last_assistant_text == f"{ECHO_PREFIX}are you still there?"
    assert after.turn == 2


async def test_an_already_running_server_is_reused_and_left_running(tmp_path: Path) -> None:
    # A bare dev server, without Tarry's search attributes: `tarry dev` must add them.
    server = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(find_binary("temporal")),
        dev_server_extra_args=dev_server_args(),
    )
    try:
        address = server.client.service_client.config.target_host
        ports = Ports(grpc=int(address.rpartition(":")[2]))
        data_dir = tmp_path / "data"
        async with serving(ports, data_dir, tmp_path) as dev:
            state = await (await Tarry(server.client).start("hi")).wait_for(WAITING, deadline(30))
            started = children(dev.process.pid)
            assert await interrupt(dev.process) == 0

        assert "reused" in "\n".join(dev.banner)
        assert state.last_assistant_text == f"{ECHO_PREFIX}hi"
        listed = await server.client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        assert {k.name for k in SEARCH_ATTRIBUTES} <= set(listed.custom_attributes)
        assert not (data_dir / "temporal.db").exists()
        assert not started, "nothing is started beside a reused server"
        # Still serving after `tarry dev` stopped.
        await server.client.workflow_service.get_system_info(GetSystemInfoRequest())
    finally:
        await server.shutdown()


async def test_when_the_dev_server_dies_dev_says_so_and_exits(tmp_path: Path) -> None:
    ports, data_dir = Ports(), tmp_path / "data"
    async with serving(ports, data_dir, tmp_path) as dev:
        (server,) = children(dev.process.pid)
        os.kill(server, signal.SIGKILL)
        code = await asyncio.wait_for(dev.process.wait(), STOP_TIMEOUT)

    (line,) = dev.stderr.read_text().strip().splitlines()
    assert code == 1
    assert line.startswith("error: the Temporal dev server stopped")
    assert str(data_dir / "temporal.log") in line
    await assert_nothing_left(ports, data_dir, {server})


async def fails_with_one_line(ports: Ports, data_dir: Path, tmp_path: Path) -> str:
    """Runs `tarry dev` expecting it to refuse to start; returns its one stderr line."""
    stderr = tmp_path / "dev.stderr"
    process = await run_python(SERVE_DEV, str(data_dir), env=stack_env(ports), stderr=stderr)
    await asyncio.wait_for(process.wait(), STARTUP_TIMEOUT)
    lines = stderr.read_text().strip().splitlines()
    assert process.returncode == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("busy", ["grpc", "ui"])
async def test_a_busy_port_gives_one_line_and_a_nonzero_exit(tmp_path: Path, busy: str) -> None:
    ports = Ports()
    busy_port = getattr(ports, busy)

    async def ignore(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # an HTTP-ish neighbour: answers nothing a gRPC client expects

    squatter = await asyncio.start_server(ignore, "127.0.0.1", busy_port)
    async with squatter:
        line = await fails_with_one_line(ports, tmp_path / "data", tmp_path)

    assert f"port {busy_port} is in use" in line
    assert ("TARRY_UI_PORT" if busy == "ui" else "TEMPORAL_ADDRESS") in line


async def test_an_unwritable_data_dir_gives_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    # A file where a directory should be: unwritable even for root, unlike chmod.
    (tmp_path / "file").write_text("")
    line = await fails_with_one_line(Ports(), tmp_path / "file" / "data", tmp_path)
    assert "cannot write to the data directory" in line
    assert "--data-dir" in line


async def test_dev_keeps_the_api_s_datasets_where_tarry_datasets_dir_says(tmp_path: Path) -> None:
    ports, data_dir, datasets = Ports(), tmp_path / "data", tmp_path / "datasets"
    async with serving(ports, data_dir, tmp_path, TARRY_DATASETS_DIR=str(datasets)) as dev:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports.api}") as http:
            created = await http.post("/v1/datasets", json={"name": "kept"})
        assert await interrupt(dev.process) == 0

    assert created.status_code == 201, created.text
    assert DatasetStore(datasets).versions("kept") == [1]
