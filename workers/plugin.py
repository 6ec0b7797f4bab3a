"""`TarryPlugin`: everything a Tarry worker is, handed to the SDK as one plugin.

The SDK's own integrations (`temporalio.contrib.openai_agents.OpenAIAgentsPlugin`,
pydantic-ai's `PydanticAIPlugin`) wire a worker this way, and so does Tarry: the
`AgentRun` workflow (and `CatalogueCheck`, through which a client asks before it starts
one on a server without standalone activities, and `AuditAct`, the trail of schedules and
evals),
the model activity with its stored conversations, the tools (and the MCP servers' in
the worker's config), the notifications of its `[[notify]]`
entries, the worker settings Tarry ships with (cache, pollers, sticky timeout), the
build of a versioned deployment and the legacy-query eviction the cache needs.
`python -m workers`, `tarry dev`, the tests and the benchmarks all build their workers
with it, so they serve runs the same way:

    plugin = TarryPlugin(TarrySettings(), tools=[*BUILTIN_TOOLS, my_tool])
    worker = Worker(client, task_queue="tarry", plugins=[plugin])

A worker's payloads go through its client's data converter, and so do its stored
conversations. Connect that client with `tarry.client.connect_temporal(settings)`, or
pass the plugin to `Client.connect(plugins=[plugin])` instead of to the worker: the
plugin then gives the client (and a `Replayer`) Tarry's converter for these settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.metadata
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkerDeploymentConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities import slots
from activities.a2a_pushes import TaskPusher
from activities.context import ContextStore
from activities.grants import Grants
from activities.guardrail_checks import GuardrailChecks, GuardrailFunction
from activities.ledger import SpendBook
from activities.memories import MemoryTools
from activities.model_calls import ModelClient
from activities.notifications import Notifier
from activities.pages import PageWriter
from activities.public_http import public_only_client
from activities.response_cache import ResponseCache
from activities.search_index import Indexer
from activities.tool_calls import BUILTIN_TOOLS, Tool, ToolHost, ToolSource
from tarry.config.settings import ConfigError, McpServer, ModelProfile, TarrySettings
from tarry.connections.store import ConnectionStore
from tarry.contracts import AgentSpec
from tarry.search import StoreOpener
from tarry.temporal.codec import data_converter
from tarry.temporal.pages import PageStore
from tarry.temporal.storage import payload_limit, storage_driver
from workers import legacy_query
from workers.telemetry import tracing_interceptors
from workflows.agent_run import AgentRunWorkflow
from workflows.audit_acts import AuditActWorkflow
from workflows.catalogue_check import CatalogueCheckWorkflow
from workflows.eval_run import EvalRunWorkflow
from workflows.ledger import SpendLedger
from workflows.run_slots import RunSlots

if TYPE_CHECKING:
    from activities.a2a_remote import RemoteAgents

__all__ = ["BUILTIN_TOOLS", "A2aExtraMissing", "McpExtraMissing", "TarryPlugin"]


class McpExtraMissing(Exception):
    """MCP servers are configured, and the `mcp` extra that talks to them is missing."""


class A2aExtraMissing(Exception):
    """Remote A2A agents are configured, and the `a2a` extra that talks to them is missing."""


class TarryPlugin(SimplePlugin):
    """The `AgentRun` workflow, its activities and Tarry's worker settings, from `settings`.

    `tools` are the tools runs may use (the built-ins unless given); `profiles` the model
    profiles and `mcp_servers` the MCP servers whose tools runs may use too (both the
    settings' config file's unless given), `agents` the sub-agents runs may delegate to
    (the config file's unless given); a new run's workspace starts with the files of
    `workspace_template`, if given (`tarry dev`: the tour's notes); `guardrail_functions`
    are the checks `python` guardrails name (`tarry.contracts.guardrails`). The worker settings
    it applies are the settings' (`TARRY_WORKFLOW_CACHE`, `TARRY_WORKFLOW_TASK_POLLERS`,
    `TARRY_STICKY_TIMEOUT`, and `TARRY_DEPLOYMENT` with `TARRY_BUILD_ID`: the worker's
    deployment version) and replace what the `Worker` was given for them. Call
    `aclose()` once its workers have stopped.
    """

    def __init__(
        self,
        settings: TarrySettings | None = None,
        *,
        tools: Iterable[Tool] = BUILTIN_TOOLS,
        profiles: Mapping[str, ModelProfile] | None = None,
        mcp_servers: Mapping[str, McpServer] | None = None,
        workspace_template: Path | None = None,
        agents: Mapping[str, AgentSpec] | None = None,
        guardrail_functions: Mapping[str, GuardrailFunction] | None = None,
    ) -> None:
        self.settings = settings or TarrySettings()
        servers = self.settings.mcp_servers() if mcp_servers is None else mcp_servers
        tools = tuple(tools)
        self._grants = _grants(self.settings, servers, tools)
        """People's grants, for the MCP servers and the tools that act as a person."""
        self._sources = [_mcp_host(servers, self._grants)] if servers else []
        self._profiles = dict(self.settings.model_profiles() if profiles is None else profiles)
        queues = {name: p.task_queue for name, p in self._profiles.items() if p.task_queue}
        self._http = httpx.AsyncClient(verify=_system_tls())
        """One connection pool for the model calls and notifications of every worker the
        plugin configures."""
        self._notifier = Notifier(self.settings, self._http)
        self._push_http = (
            self._http
            if self.settings.tarry_a2a_push_private
            else public_only_client(verify=_system_tls())
        )
        """Where A2A push configs' URLs, which any reader of a task sets, are posted:
        public addresses only, unless the deployment allows its own network."""
        self._pusher = TaskPusher(self.settings.action_key(), self._push_http)
        self._guardrails = GuardrailChecks(self._profiles, self._http, guardrail_functions)
        agents = self.settings.agents() if agents is None else agents
        self._remotes = _remote_agents(agents, self.settings)
        self.tools = ToolHost(
            self.settings.tarry_workspace_root,
            tools,
            self._sources,
            queues,
            self._profiles,
            self.settings.tarry_read_file_max_bytes,
            workspace_template,
            agents,
            self._notifier.events,
            self.settings.guardrails(),
            {name: p.context_budget for name, p in self._profiles.items()},
            self._grants,
        )
        index = self.settings.tarry_search_index
        embedding = self.settings.embedding_profile()
        self._stores = None if index is None else StoreOpener(index, embedding, self._http)
        """The index and the memories (`TARRY_SEARCH_INDEX`): one store, opened once; its
        embedding profile embeds the memories."""
        self._indexer = (
            None if self._stores is None else Indexer(self._stores, embedding, self._http)
        )
        self._memories = None if self._stores is None else MemoryTools(self._stores)
        self.tools.search_index = self._stores is not None
        self._interceptors = tracing_interceptors(self.settings)
        super().__init__(
            "tarry.TarryPlugin",
            data_converter=data_converter(self.settings),
            workflows=[
                AgentRunWorkflow,
                CatalogueCheckWorkflow,
                EvalRunWorkflow,
                AuditActWorkflow,
                SpendLedger,
                RunSlots,
            ],
            workflow_runner=workflows_passed_through,
        )

    def model_client(self, converter: DataConverter) -> ModelClient:
        """The model activity's host, storing conversations with `converter`: the worker
        client's, so they are encrypted exactly as the payloads Temporal sees. It keeps of
        each the window the largest of its profiles' context budgets can be sent."""
        window = max((p.context_budget for p in self._profiles.values()), default=None)
        driver = storage_driver(self.settings)
        contexts = ContextStore(driver, converter, window)
        responses = ResponseCache(driver, converter)
        return ModelClient(self._profiles, self.tools, contexts, self._http, responses)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Adds the model and tool activities, with a model client built for the worker's
        own data converter (the SDK calls this as the worker is built)."""
        config = super().configure_worker(config)
        converter = config["client"].data_converter
        models = self.model_client(converter)
        spend = SpendBook(self._profiles)
        self.tools.payload_limit = payload_limit(converter)
        # Where the worker's large payloads go, so clients of the same converter find them.
        pages = PageWriter(PageStore.of(converter, storage_driver(self.settings)))
        config["activities"] = [
            *config.get("activities", ()),
            models.call_llm,
            pages.store_transcript_page,
            pages.store_transcript_page_index,
            self._notifier.notify,
            self._pusher.push_task,
            self._guardrails.check_guardrails,
            spend.reserve_spend,
            spend.settle_spend,
            slots.acquire,
            slots.release,
            *self.tools.activities(),
            *(self._remotes.activities() if self._remotes else []),
            *([self._indexer.index_messages] if self._indexer else []),
            *(self._memories.activities() if self._memories else []),
        ]
        config["interceptors"] = [*config.get("interceptors", ()), *self._interceptors]
        s = self.settings
        # A run not in the cache replays its history (one continue-as-new segment) on
        # its next workflow task; a run in it resumes where it left off.
        config["max_cached_workflows"] = s.tarry_workflow_cache
        config["max_concurrent_workflow_task_polls"] = s.tarry_workflow_task_pollers
        config["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=s.tarry_sticky_timeout)
        if s.tarry_task_queue_activities_per_second is not None:
            rate = s.tarry_task_queue_activities_per_second
            config["max_task_queue_activities_per_second"] = rate
        if (deployment := _deployment_config(s)) is not None:
            config["deployment_config"] = deployment
        elif not config.get("build_id"):
            config["build_id"] = unversioned_build_id()
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Raises `legacy_query.LegacyQueryHookMissing`, before the worker polls, when a
        cache is asked for and the SDK lacks what its workaround needs."""
        if self.settings.tarry_workflow_cache > 0:
            # Without a cache core evicts every run after each task: nothing to work around.
            legacy_query.install(worker)
        await super().run_worker(worker, next)

    async def aclose(self) -> None:
        """Closes the model calls' connection pool and the MCP sessions (stopping the
        stdio servers), and sends the spans not sent yet; call once the workers have
        stopped."""
        await self._http.aclose()
        await self._push_http.aclose()
        if self._remotes is not None:
            await self._remotes.aclose()
        if self._stores is not None:
            await self._stores.aclose()
        for source in self._sources:
            await source.aclose()
        self._grants.close()
        for interceptor in self._interceptors:
            if callable(shutdown := getattr(interceptor, "shutdown", None)):
                await asyncio.to_thread(shutdown)  # `workers.tracing.RunTracing`


def _deployment_config(settings: TarrySettings) -> WorkerDeploymentConfig | None:
    """The worker's build of its deployment, with `TARRY_DEPLOYMENT` and `TARRY_BUILD_ID`
    set: every workflow is PINNED, a run to the build it started on, until its hand-over
    continues it on the deployment's current build (`AgentRun._hand_over`); a catalogue
    check starts, as a new run does, on the current build. The behaviour is the worker's
    default, not the workflow's own: an unversioned worker refuses a workflow that names
    one. None: the worker is unversioned, as before versioned deploys."""
    if settings.tarry_deployment is None or settings.tarry_build_id is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.tarry_deployment, settings.tarry_build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def unversioned_build_id() -> str:
    """The build an unversioned worker reports to the server: Tarry's release. Without
    one the SDK hashes the bytecode of every loaded module, reading each from disk (and
    compiling what has no cache, such as a test's rewritten modules): over a second of
    CPU at each worker's start, for an id that only labels its pollers and task
    completions. A versioned worker names its build itself (`TARRY_BUILD_ID`)."""
    return f"tarry-{importlib.metadata.version('tarry')}"


def workflows_passed_through(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's sandbox, with Tarry's `workflows` package passed through: imported
    once per process, not once per run. The SDK's sandbox imports a workflow's own module
    afresh for every run it creates, so each run not in the cache (after a restart, a
    deploy, an eviction) paid for executing `workflows.agent_run` and for `@workflow.defn`
    checking every handler's signature again: several times the cost of replaying a
    parked run's history. What the sandbox gave for it: a fresh copy of the module's
    globals per run (`workflows` keeps none that change: a run's state is its instance's)
    and its clock and randomness checks on the names `agent_run` itself imports (the
    modules it calls, `workflows.*` and `tarry.contracts`, were passed through already).
    Its checks of builtins (`open`, `input`) still hold; determinism rests, as for the rest
    of `workflows`, on the layer rule (a workflow imports only `tarry.contracts` and the
    pure `tarry.core`: `tests/test_layers.py`) and the replay tests. History and replay are the
    same. Another runner (the SDK's unsandboxed one, for debugging) is kept as it is."""
    runner = runner or SandboxedWorkflowRunner()
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    restrictions = runner.restrictions.with_passthrough_modules("workflows")
    return dataclasses.replace(runner, restrictions=restrictions)


def _mcp_host(servers: Mapping[str, McpServer], grants: Grants) -> ToolSource:
    """The MCP servers' tool source, from the `mcp` extra: a worker without MCP servers
    never imports it, so `pip install tarry` still serves runs."""
    try:
        from activities.mcp_tools import McpHost
    except ImportError as e:
        raise McpExtraMissing(
            f"MCP servers are configured ({', '.join(servers)}) but the mcp extra is "
            f"missing ({e.name} cannot be imported); install it with: pip install 'tarry[mcp]'"
        ) from e
    return McpHost(servers, grants)


def _grants(
    settings: TarrySettings, servers: Mapping[str, McpServer], tools: Iterable[Tool]
) -> Grants:
    """People's grants in the connections store, when an MCP server or a tool acts as a
    person and the worker has the store's key (else every such call fails, naming it).
    A tool that names an OAuth provider the config file lacks is refused here, at start,
    rather than at its first call."""
    needed = {t.name: t.oauth.provider for t in tools if t.oauth is not None}
    providers = settings.oauth_providers() if needed else {}
    for name, provider in needed.items():
        if provider not in providers:
            raise ConfigError(
                f"tool {name!r} acts as a person with grants of {provider!r}, but the"
                f" config file has no [oauth_providers.{provider}] table: add it"
            )
    key = settings.tarry_connections_key
    if key is None or not (needed or any(s.auth == "oauth" for s in servers.values())):
        return Grants(None)
    return Grants(ConnectionStore(settings.tarry_connections_db, key.get_secret_value()))


def _remote_agents(agents: Mapping[str, AgentSpec], settings: TarrySettings) -> RemoteAgents | None:
    """The remote A2A agents' activities, from the `a2a` extra: a worker whose agents are
    all local never imports it."""
    remote = [name for name, spec in agents.items() if spec.a2a is not None]
    if not remote:
        return None
    try:
        from activities.a2a_remote import RemoteAgents
    except ImportError as e:
        raise A2aExtraMissing(
            f"remote A2A agents are configured ({', '.join(remote)}) but the a2a extra is "
            f"missing ({e.name} cannot be imported); install it with: pip install 'tarry[a2a]'"
        ) from e
    return RemoteAgents(settings.a2a_headers(), settings.public_url(), settings.action_key())


@functools.cache
def _system_tls() -> ssl.SSLContext:
    """The TLS settings httpx builds for a client by default (the system's authorities, or
    `SSL_CERT_FILE`'s), built once per process: loading the authorities costs 25 ms of CPU
    each time, and a process that makes many plugins (a test suite, say) paid it for each."""
    return httpx.create_ssl_context()
