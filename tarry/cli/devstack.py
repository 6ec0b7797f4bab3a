"""`tarry dev`: everything a run needs on one machine, in one process tree, offline.

A Temporal dev server (persisted in SQLite, so runs survive a restart), an
OpenAI-compatible model (the offline scripted one unless a model is configured: it plays
the tour, `tarry.cli.tour`, and echoes everything else), a worker whose runs' workspaces
start with the tour's notes, and (`serve_dev` only) the HTTP API. `dev_stack` is the
context manager that brings the first three up and takes down exactly what it started;
`serve_dev` (`tarry dev`) and the demo share it. The server is `devserver`'s: reused
when one answers.

A problem the user can fix (a busy port, no `temporal` binary, a data directory
that cannot be written) is a `DevStackError` whose message is one line saying
what to do; `serve_dev` prints it without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.worker import Worker

from tarry.cli import tour
from tarry.cli.devserver import DevStackError, temporal_server, ui_port
from tarry.cli.doctor import report
from tarry.cli.processes import HOST, DevServer
from tarry.cli.stopping import race, stop_signals, unless_stopped
from tarry.client import Tarry
from tarry.client.dataset_store import DatasetStore
from tarry.config.logs import configure_logging
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.temporal.connection import connect_temporal, temporal_connection
from tarry.temporal.pages import PageStore
from tarry.temporal.storage import storage_driver
from tarry.testing.scripted_model import ScriptedModel, ScriptStep
from workers.plugin import TarryPlugin
from workers.telemetry import metrics_url, tracing_summary, worker_runtime

T = TypeVar("T")


def uses_offline_model(settings: TarrySettings) -> bool:
    """No model configured (neither OPENAI_BASE_URL nor OPENAI_API_KEY): use the scripted one."""
    return settings.openai_api_key is None and "openai_base_url" not in settings.model_fields_set


@dataclass(frozen=True)
class DevStack:
    """What `dev_stack` brought up (or found) and how to reach it."""

    client: Client
    settings: TarrySettings
    task_queue: str
    """The queue the stack's worker polls; start runs there."""
    server: DevServer | None
    """The dev server; None when one already listened on TEMPORAL_ADDRESS."""
    worker: asyncio.Task[None]
    """The worker's `run()`; it ends only at shutdown or on a fatal error."""
    ui_url: str
    model: str
    """Which model answers, for people: the scripted one or a profile's URL."""
    data_dir: Path
    workspace_root: Path
    scripted: ScriptedModel | None

    @property
    def started_server(self) -> bool:
        return self.server is not None

    @property
    def tarry(self) -> Tarry:
        """A client of the stack, as `Tarry.connect` builds one from its settings: acting
        as the local user, reading a long run's pages from the workers' store even with
        large-payload storage off, keeping datasets in `TARRY_DATASETS_DIR`."""
        pages = PageStore.of(self.client.data_converter, storage_driver(self.settings))
        caller, datasets = self.settings.local_caller(), DatasetStore.of(self.settings)
        return Tarry(self.client, self.task_queue, caller, pages=pages, datasets=datasets)

    async def while_up(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs `work` while the stack is up. Should the dev server or the worker stop
        first, `work` is cancelled and `DevStackError` says which: a worker whose server
        died only retries, and a person would see nothing happen."""
        finished = await race(work, self._watch())
        assert finished is not None, "_watch only ever raises"
        return finished.result()

    async def _watch(self) -> None:
        watched: set[asyncio.Future[Any]] = {self.worker}
        server = self.server
        process = server.process if server is not None else None
        if process is not None:
            watched.add(asyncio.ensure_future(process.wait()))
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in watched - {self.worker}:
                future.cancel()
        if server is not None and process is not None and process.returncode is not None:
            raise DevStackError(
                f"the Temporal dev server stopped (exit code {process.returncode}); "
                f"its log is {server.log}"
            )
        error = None if self.worker.cancelled() else self.worker.exception()
        cause = f": {_one_line(error)}" if error else ""
        raise DevStackError(f"the worker stopped{cause}")

    def run_url(self, run_id: str) -> str:
        return f"{self.ui_url}/namespaces/{self.settings.temporal_namespace}/workflows/{run_id}"

    def summary(self) -> list[str]:
        """The few lines that tell a person where everything is."""
        s = self.settings
        server = "started here" if self.started_server else "already running: reused, left running"
        return [
            f"Temporal   {s.temporal_address} (namespace {s.temporal_namespace}; {server})",
            f"Web UI     {self.ui_url}",
            f"Model      {self.model}",
            f"Worker     task queue {self.task_queue}; workspaces in {self.workspace_root}",
            f"Data       {self.data_dir}",
            f"Metrics    {metrics_url(s) or 'off (TARRY_METRICS_PORT=9464 serves them)'}",
            f"Tracing    {tracing_summary(s)}",
            f"Config     {s.tarry_config or 'none (TARRY_CONFIG names a file)'}",
        ]


@asynccontextmanager
async def dev_stack(
    settings: TarrySettings,
    data_dir: Path,
    *,
    script: Iterable[ScriptStep] = (),
    isolate_on_reuse: bool = False,
    guide_tour: str | None = None,
) -> AsyncIterator[DevStack]:
    """Starts (or reuses) the dev server, the model and a worker; stops what it started.

    The offline scripted model plays the tour's conversation for a run that opens with
    its prompt, and answers other requests with `script`, in order; past it, it echoes
    the user; with `guide_tour` (`tour.TOURS`), it plays that guide's tour too.
    `isolate_on_reuse` gives the worker a task queue of its own when a server
    was already running, because a worker already polling the shared queue (another
    `tarry dev`, with another model) would otherwise pick up the caller's runs.
    """
    data_dir = _prepare_data_dir(data_dir)
    settings = _storage_in(settings, data_dir)
    async with AsyncExitStack() as stack:
        client, server = await temporal_server(stack, settings, data_dir)
        scripted = None
        if uses_offline_model(settings):
            scripted = ScriptedModel(
                script,
                conversations=tour.script(guide_tour).conversations,
                when_exhausted="echo",
            )
            await scripted.start()
            stack.push_async_callback(scripted.close)
            if settings.embedding_profile() is None:  # semantic search by its embeddings
                settings = settings.model_copy(update={"tarry_embedding": scripted.embeddings})
        queue = settings.tarry_task_queue
        if isolate_on_reuse and server is None:
            queue = f"{queue}-{uuid.uuid4().hex[:8]}"
        workspace_root = _workspace_root(settings, data_dir)
        # The worker's own client: its runtime (a client's) forwards core's logs, and
        # serves metrics when they are on.
        worker_client = await connect_temporal(settings, runtime=worker_runtime(settings))
        worker = _start_worker(stack, worker_client, settings, queue, workspace_root, scripted)
        yield DevStack(
            client=client,
            settings=settings,
            task_queue=queue,
            server=server,
            worker=worker,
            ui_url=f"http://{HOST}:{ui_port(settings)}",
            model=_describe_model(settings, scripted),
            data_dir=data_dir,
            workspace_root=workspace_root,
            scripted=scripted,
        )


def _api_line(settings: TarrySettings, api: str) -> str:
    """Where the HTTP API is, and whether a request needs a token (the docs need none)."""
    if not settings.api_authenticates():
        return f"HTTP API   {api} (docs {api}/docs)"
    return (
        f"HTTP API   {api} (tokens required: Authorization: Bearer TOKEN, a token of"
        f" {settings.api_token_sources()}; docs {api}/docs need none)"
    )


async def serve_dev(settings: TarrySettings, data_dir: Path, guide_tour: str | None = None) -> int:
    """`tarry dev`: serves until SIGINT or SIGTERM (0), or until a `DevStackError` (1).
    `guide_tour` names a guide's tour for the offline model to play (`--tour`)."""
    # Only trouble, one line per expected failure: the summary says where everything is.
    configure_logging(logging.WARNING)
    async with stop_signals() as stop:
        try:
            async with (
                dev_stack(settings, data_dir, guide_tour=guide_tour) as stack,
                serving_api(stack) as api,
            ):
                # `tarry doctor`'s report too, but for the pollers: the worker is starting.
                found = await report(
                    stack.client, temporal_connection(stack.settings), stack.settings, pollers=False
                )
                summary = [*stack.summary(), _api_line(stack.settings, api), *found.lines]
                if guide_tour is not None:
                    summary.append(tour.line(guide_tour, played=stack.scripted is not None))
                for line in [*summary, *(f"problem: {p}" for p in found.problems)]:
                    print(line, flush=True)
                print("Ctrl-C to stop.", flush=True)
                await unless_stopped(stop, stack.while_up(asyncio.Event().wait()))
                print("stopping…", flush=True)
        except DevStackError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            return 1
    return 0


@asynccontextmanager
async def serving_api(stack: DevStack) -> AsyncIterator[str]:
    """The HTTP API over the stack's client, on loopback at TARRY_API_PORT; its URL."""
    # Imported here: the demo shares this module and needs no web server.
    from tarry.api import ApiServer, ApiSetupError, check_exposure, create_app

    try:
        # As `tarry serve` does: TARRY_API_ALLOWED_HOSTS is checked, and `*` needs tokens.
        check_exposure(HOST, stack.settings)
        # Its workers' workspaces, where the inbox sees whether a preview went stale.
        settings = stack.settings.model_copy(update={"tarry_workspace_root": stack.workspace_root})
        app = create_app(stack.tarry, settings)
        server = ApiServer(app, HOST, settings.tarry_api_port, settings.api_table().limits)
        await server.start()
    except ApiSetupError as e:
        raise DevStackError(str(e).replace("--port or ", "")) from None
    try:
        yield server.url
    finally:
        await server.stop()


# --- The pieces -----------------------------------------------------------------


def _prepare_data_dir(data_dir: Path) -> Path:
    """The data directory, absolute, created and known to be writable."""
    data_dir = data_dir.resolve()
    # Checked by writing, not by permission bits: root passes every access check, and a
    # read-only mount or a file in the way fails only when something is written.
    probe = data_dir / f".tarry-write-test-{uuid.uuid4().hex[:8]}"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise DevStackError(
            f"cannot write to the data directory {data_dir} ({reason}); "
            "choose a writable directory with --data-dir"
        ) from None
    return data_dir


def _workspace_root(settings: TarrySettings, data_dir: Path) -> Path:
    if "tarry_workspace_root" in settings.model_fields_set:
        return settings.tarry_workspace_root.resolve()
    return data_dir / "workspaces"


def _storage_in(settings: TarrySettings, data_dir: Path) -> TarrySettings:
    """Payloads, the search index and connections go with the server's data, unless set."""
    payloads, index = data_dir / "payloads", str(data_dir / "search.db")
    defaults = {"tarry_storage_dir": payloads, "tarry_search_index": index}
    defaults["tarry_connections_db"] = data_dir / "connections.db"
    chosen = settings.model_fields_set
    return settings.model_copy(update={k: v for k, v in defaults.items() if k not in chosen})


def _profiles(settings: TarrySettings, scripted: ScriptedModel | None) -> dict[str, ModelProfile]:
    """The settings' profiles; offline, `default` is the scripted model in OpenAI's dialect
    and `anthropic` (unless ANTHROPIC_API_KEY names a real one) the same model in
    Anthropic's, so `tarry start --model anthropic` tries that provider with no key."""
    profiles = settings.model_profiles()
    if scripted is not None:
        profiles["default"] = ModelProfile(base_url=scripted.base_url, model="scripted")
        profiles.setdefault(
            "anthropic",
            ModelProfile(provider="anthropic", base_url=scripted.root_url, model="scripted"),
        )
    return profiles


def _describe_model(settings: TarrySettings, scripted: ScriptedModel | None) -> str:
    if scripted is not None:
        return f"offline scripted model at {scripted.base_url} (no OPENAI_* set)"
    default = settings.model_profiles()["default"]
    return f"{default.model} at {default.base_url}"


def _start_worker(
    stack: AsyncExitStack,
    client: Client,
    settings: TarrySettings,
    task_queue: str,
    workspace_root: Path,
    scripted: ScriptedModel | None,
) -> asyncio.Task[None]:
    plugin = TarryPlugin(
        settings.model_copy(update={"tarry_workspace_root": workspace_root}),
        profiles=_profiles(settings, scripted),
        workspace_template=tour.WORKSPACE,
    )
    # Closed after the worker stops (callbacks run last-in, first-out): a call still
    # finishing during shutdown needs its HTTP client.
    stack.push_async_callback(plugin.aclose)
    worker = Worker(client, task_queue=task_queue, plugins=[plugin])
    # `run()` in a task of our own, not `async with worker`: on a fatal error that
    # cancels the task that entered it, which would end `tarry dev` in a traceback.
    running = asyncio.create_task(worker.run())
    stack.push_async_callback(_stop_worker, worker, running)
    return running


async def _stop_worker(worker: Worker, running: asyncio.Task[None]) -> None:
    if not running.done():
        await worker.shutdown()
    # A fatal error was reported while serving (`DevStack.while_up`); at shutdown it
    # changes nothing, and raising it would skip stopping the server.
    with contextlib.suppress(Exception):
        await running


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
