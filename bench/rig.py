"""What every benchmark shares: a dev server of its own, an in-process Tarry worker,
memory readings and the figures' formatting."""

from __future__ import annotations

import os
import statistics
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table
from temporalio.client import Client
from temporalio.worker import Interceptor, Worker

from activities.model_calls import ModelClient
from activities.tool_calls import ToolHost
from tarry.cli.processes import DevServer, WorkerProcess
from tarry.client import Tarry, connect_temporal
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.config.tables import Provider
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel
from workers.plugin import TarryPlugin

console = Console(highlight=False)
if not console.is_terminal:
    # Piped to a file or a test: wide enough that the tables keep one line per row.
    console = Console(highlight=False, width=180)

DEFAULT_CONFIG = "default"
LOW_LATENCY = "low-latency"
CONFIGS = {DEFAULT_CONFIG: [], LOW_LATENCY: dev_server_args()}
"""The dev server's dynamic config: as it ships, and the values `tarry dev` sets."""


@dataclass(frozen=True)
class Server:
    process: DevServer
    client: Client
    """A client with Tarry's data converter."""
    storage: Path
    """The payload store the client shares with the benchmark's workers."""


@asynccontextmanager
async def dev_server(config: Sequence[str], data_dir: Path | None = None) -> AsyncIterator[Server]:
    """A dev server of the benchmark's own on a SQLite file; `config` are the extra
    `start-dev` arguments (its dynamic config). Large payloads go to `<data_dir>/payloads`,
    where `tarry.cli.processes.WorkerProcess` workers with `workspace_root=<data_dir>/workspaces`
    look for them too."""
    with tempfile.TemporaryDirectory(prefix="tarry-bench-") as tmp:
        root = data_dir or Path(tmp)
        process = DevServer(root, extra_args=config)
        async with process:
            storage = root / "payloads"
            yield Server(process, await _connect(process, storage), storage)


async def connect(server: Server) -> Client:
    """Another connection to the server, with the same data converter and payload store
    as `server.client`."""
    return await _connect(server.process, server.storage)


async def _connect(process: DevServer, storage: Path) -> Client:
    settings = TarrySettings(temporal_address=process.address, tarry_storage_dir=storage)
    return await connect_temporal(settings)


@dataclass(frozen=True)
class InProcessTarry:
    tarry: Tarry
    plugin: TarryPlugin


def tarry_plugin(
    server: Server,
    base_url: str,
    workspace_root: Path,
    workflow_cache: int | None = None,
    stream: bool = True,
    provider: Provider = "openai",
    search_index: str | None = None,
) -> TarryPlugin:
    """Tarry's worker parts with one `default` profile at `base_url` (asking for streamed
    answers unless `stream` is false, in `provider`'s dialect), conversations kept in the
    server's payload store, and `workflow_cache` runs kept in memory (None:
    `shipped_cache()`), indexing messages into `search_index` (None: no index)."""
    cache = shipped_cache() if workflow_cache is None else workflow_cache
    settings = TarrySettings(
        temporal_address=server.process.address,
        tarry_workspace_root=workspace_root,
        tarry_storage_dir=server.storage,
        tarry_workflow_cache=cache,
        tarry_search_index=search_index,
    )
    profile = ModelProfile(provider=provider, base_url=base_url, model="scripted", stream=stream)
    return TarryPlugin(settings, profiles={"default": profile})


def model_parts(
    server: Server, base_url: str, workspace_root: Path, stream: bool = True
) -> tuple[ModelClient, ToolHost]:
    """Tarry's LLM activity and tools as `TarryPlugin` builds them, for the floors that
    run them without Tarry's workflow; `models.aclose()` closes them."""
    plugin = tarry_plugin(server, base_url, workspace_root, stream=stream)
    return plugin.model_client(server.client.data_converter), plugin.tools


def shipped_cache() -> int:
    """The workflow cache Tarry's workers use unless told otherwise: the settings' default,
    or `TARRY_WORKFLOW_CACHE` where the benchmark's caller set it."""
    return TarrySettings().tarry_workflow_cache


def shipped_label() -> str:
    """How a row measured with the shipped settings is named."""
    how = "TARRY_WORKFLOW_CACHE" if "TARRY_WORKFLOW_CACHE" in os.environ else "as shipped"
    return f"Tarry, cache {shipped_cache():,} ({how})"


_SET_BY_WORKER_PROCESS = {
    "TARRY_TASK_QUEUE",
    "TARRY_MODEL",
    "TARRY_WORKSPACE_ROOT",
    "TARRY_STORAGE_DIR",
}


def tarry_env() -> dict[str, str]:
    """The `TARRY_*` settings the benchmark's caller set (e.g. `TARRY_WORKFLOW_CACHE`), for
    worker processes, whose environment `WorkerProcess` otherwise builds from scratch."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith("TARRY_") and name not in _SET_BY_WORKER_PROCESS
    }


@asynccontextmanager
async def tarry_worker(
    server: Server,
    base_url: str,
    workspace_root: Path,
    workflow_cache: int | None = None,
    stream: bool = True,
    provider: Provider = "openai",
    search_index: str | None = None,
) -> AsyncIterator[InProcessTarry]:
    """Tarry's own worker (`TarryPlugin`) in this process, on a task queue of its own,
    keeping `workflow_cache` runs in memory between their tasks (None: `shipped_cache()`),
    indexing into `search_index` (None: no index)."""
    plugin = tarry_plugin(
        server, base_url, workspace_root, workflow_cache, stream, provider, search_index
    )
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(server.client, task_queue=queue, plugins=[plugin]):
            yield InProcessTarry(Tarry(server.client, queue), plugin)
    finally:
        await plugin.aclose()


def worker_process(
    server: Server,
    model: ScriptedModel,
    queue: str,
    data_dir: Path,
    extra_env: Mapping[str, str],
    *,
    floor: bool = False,
) -> WorkerProcess:
    """A worker process on `queue` for `model`, its workspaces and log in `data_dir`, with
    the payload store of `dev_server(..., data_dir)`: `python -m workers`, or with `floor`
    `python -m bench.worker`."""
    return WorkerProcess(
        address=server.process.address,
        task_queue=queue,
        model_url=model.base_url,
        workspace_root=data_dir / "workspaces",
        log=data_dir / "worker.log",
        module="bench.worker" if floor else "workers",
        extra_env=extra_env,
    )


@asynccontextmanager
async def floor_worker(
    server: Server,
    base_url: str,
    workspace_root: Path,
    workflow: type,
    *,
    with_tools: bool = False,
    interceptors: Sequence[Interceptor] = (),
) -> AsyncIterator[str]:
    """Temporal's floor: a plain SDK worker for `workflow` (`bench.floor`) on a task queue
    of its own, running Tarry's model activity (and tools, `with_tools`) as `TarryPlugin`
    builds them, without Tarry's workflow or worker settings; yields the queue."""
    plugin = tarry_plugin(server, base_url, workspace_root)
    models = plugin.model_client(server.client.data_converter)
    tools = plugin.tools.activities() if with_tools else []
    queue = f"bench-floor-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(
            server.client,
            task_queue=queue,
            workflows=[workflow],
            activities=[models.call_llm, *tools],
            interceptors=interceptors,
        ):
            yield queue
    finally:
        await plugin.aclose()


# --- Memory -----------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, in MiB."""
    process = psutil.Process(pid)
    total: int = process.memory_info().rss
    for child in process.children(recursive=True):
        total += child.memory_info().rss
    return total / 2**20


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident memory (Linux `VmHWM`) in MiB; None elsewhere."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


# --- Figures ------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:,.1f}"


def ratio(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return "n/a"
    return f"{value / reference:.2f}x"


def percentile(samples: Sequence[float], p: int) -> float:
    """The `p`-th percentile (1-99, interpolated); 100 is the maximum."""
    if p >= 100 or len(samples) < 2:
        return max(samples)
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


def table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold")
    for i, column in enumerate(columns):
        t.add_column(column, justify="left" if i == 0 else "right")
    return t
