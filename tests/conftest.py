"""Real parts for every test: a Temporal dev server started by the session, a worker
per test on its own task queue, and the scripted model over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from activities.tool_calls import Tool
from bench import pglite
from tarry.cli import processes
from tarry.client import RunHandle
from tarry.config.settings import DEFAULT_WORKFLOW_CACHE, McpServer, ModelProfile, TarrySettings
from tarry.contracts import AgentSpec, ChatMessage, Timeouts
from tarry.temporal.codec import data_converter
from tarry.temporal.entrypoint import exit_now
from tarry.temporal.servers import add_search_attributes, find_binary
from tarry.testing import ScriptedAgent, start_dev_server
from tarry.testing.scripted_model import ScriptedModel
from tests import search_stores
from tests.deadline import HEARTBEAT, deadline
from tests.faults import replay
from tests.scheduling import HELD, pytest_xdist_make_scheduler  # noqa: F401 (a hook)
from workers.plugin import workflows_passed_through
from workflows.agent_run import AgentRunWorkflow

if TYPE_CHECKING:
    from tests.cli import Cli, Gate
    from tests.http_api import Access, Api

CANARY_KEY = "sk-tarry-canary-0c7f3b9e1d"
"""The API key every test worker holds; it must never show up in history."""
HISTORIES = Path(__file__).parent / "histories"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-histories",
        action="store_true",
        help="write the histories of end-to-end runs to tests/histories/ for replay tests",
    )
    parser.addoption(
        "--record-screenshots",
        action="store_true",
        help="write the guides' pictures that browser tests take into docs/ (look at them)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pytest-timeout's per-test bound (`timeout` in pyproject.toml) is a wait like any
    # other: scaled by the one deadline (tests/deadline.py). Set before pytest-timeout
    # reads it in its own `pytest_configure`; an explicit `--timeout` stands as given.
    if config.getoption("timeout", None) is None and config.getini("timeout"):
        config.option.timeout = deadline(float(config.getini("timeout")))
    processes.PORTS = _ports_of_this_worker()
    _interruptible()


def _ports_of_this_worker() -> range:
    """The ports this xdist worker's servers take (`free_port`): a slice of 10000-19999
    of its own. Nothing holds a picked port until its server binds it, so workers that
    picked from one range started servers on the same port now and then ("address
    already in use"); and the processes Tarry starts (`tarry dev` picks its dev server's
    HTTP and metrics ports) pick in 20000-31999, `PORTS` as it ships."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = 10_000 // workers
    return range(10_000 + worker * size, 10_000 + (worker + 1) * size)


TIERS = ("unit", "workflow", "e2e", "replay")
"""The suite's tiers, one marker each, described in pyproject.toml's `markers`
(`scripts/test -m unit`, `-m "not e2e"`): every test has exactly one, given by
`pytest_collection_modifyitems` from the tables below and the fixtures it uses, so that
no test file says its own. `--strict-markers` refuses a tier pyproject.toml lacks."""

REPLAY = {"test_replay.py"}
END_TO_END = {
    # Whole files: most of their tests run processes, stacks or a browser.
    "test_api_contract.py",
    "test_bench.py",
    "test_chat.py",
    "test_cli_colour.py",
    "test_client_scripts.py",
    "test_compose.py",
    "test_config_errors.py",
    "test_connection.py",
    "test_cpu_report.py",
    "test_demo.py",
    "test_devstack.py",
    "test_doc_examples.py",
    "test_eval_crash.py",
    "test_eval_page.py",
    "test_guide_tours.py",
    "test_inbox.py",
    "test_inbox_timeline.py",
    "test_legacy_query_lost_task.py",
    "test_legacy_query_race.py",
    "test_mcp_server.py",
    "test_mcp_tools.py",
    "test_outside_callers.py",
    "test_real_model.py",
    "test_rolling_deploy.py",
    "test_scheduling.py",
    "test_sdk_legacy_query_bug.py",
    "test_server_restart.py",
    "test_soak.py",
    "test_startup.py",
    "test_testing_guide.py",
    "test_tour.py",
    "test_traces.py",
    "test_typed_face.py",
    "test_ui_readability.py",
    "test_wheel.py",
    "test_worker_crash.py",
    # Single tests of files otherwise of another tier.
    "test_approvals.py::test_an_approval_survives_a_killed_worker_and_runs_the_tool_once",
    "test_cli.py::test_ctrl_c_during_send_pauses_the_run_and_a_second_one_leaves",
    "test_cli.py::test_ctrl_c_while_the_answer_streams_says_so_on_a_line_of_its_own",
    "test_cli.py::test_scripted_model_serves_its_script_until_ctrl_c",
    "test_cli.py::test_watch_prints_messages_as_they_come_and_exits_at_the_stop_point",
    "test_cli.py::test_worker_serves_runs_until_sigterm",
    "test_docs.py::test_scripts_docs_builds_the_site_with_warnings_as_errors_and_says_where",
    "test_doctor.py::test_missing_search_attributes_are_a_problem_whose_command_creates_them",
    "test_encryption.py::test_a_malformed_key_is_one_error_line",
    "test_encryption.py::test_the_codec_server_refuses_to_start_without_a_key",
    "test_encryption.py::test_the_temporal_cli_shows_plain_text_through_the_codec_server",
    "test_http_api_auth.py::test_with_no_tokens_a_non_loopback_host_is_refused",
    "test_layers.py::test_a_client_and_a_worker_load_without_any_extra",
    "test_layers.py::test_the_tarry_command_without_its_extra_says_how_to_install_it",
    "test_scripted_model.py::test_cli_serves_a_script_until_sigterm",
    "test_scripted_model.py::test_the_guides_example_script_plays_as_the_guide_says",
    "test_secrets.py::test_no_api_key_in_the_worker_process_logs",
    "test_streaming.py::test_watch_in_a_terminal_shows_the_words_before_the_answer_ends",
    "test_streaming.py::test_watch_shows_an_answer_longer_than_the_publish_limit_whole_and_once",
}
"""The end-to-end tests, by file or by `file::test` (all of its parameters)."""
TEMPORAL_SERVERS = {"temporal", "time_skipping"}
"""The fixtures of a Temporal server: a test that uses one, itself or through another
(`agent`, `cli`, `api`, ...), is a workflow test unless the tables say otherwise."""


def tier(item: pytest.Item) -> str:
    """The tier of `item`, one of `TIERS`."""
    file = item.path.name
    if file in REPLAY:
        return "replay"
    name = getattr(item, "originalname", item.name)
    if file in END_TO_END or f"{file}::{name}" in END_TO_END:
        return "e2e"
    if TEMPORAL_SERVERS & set(getattr(item, "fixturenames", ())):
        return "workflow"
    return "unit"


HANDED_OUT = ("e2e", "workflow", "replay", "unit")
"""The tiers in the order scripts/test hands them out, slowest first: a process or a
browser takes seconds, a unit test a moment, and the quick tests fill the run's end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = {item: tier(item) for item in items}
    for item in items:
        item.add_marker(tiers[item])
    # The long poles first (scripts/test hands tests out in this order, one or a file at
    # a time as workers free up), so that none starts last and alone: a test that asks
    # for more time than the default bound, longest first; then the files held together;
    # then the rest by tier (`HANDED_OUT`), each in the files' order.
    default = float(config.getini("timeout") or 0)
    items.sort(
        key=lambda item: (
            -declared_timeout(item, default),
            item.path.name not in HELD,
            HANDED_OUT.index(tiers[item]),
        )
    )


def declared_timeout(item: pytest.Item, default: float) -> float:
    """The `timeout` mark's bound (scaled already) when it is over `default`: a test
    that says it takes long; 0 for any other."""
    mark = item.get_closest_marker("timeout")
    declared = float(mark.args[0]) if mark and mark.args else 0.0
    return declared if declared > deadline(default) else 0.0


def _interruptible() -> None:
    """Tests press Ctrl-C as a person at a terminal does, where SIGINT interrupts. A suite
    started in the background by a shell without job control (`scripts/test &` in a
    script, a CI step) inherits SIGINT ignored, and so would every process a test
    starts: `tarry send` would then pause at a first Ctrl-C (a handler of its own) and
    shrug off the second. A handler in this process lets children start with SIGINT's
    default, since exec resets a caught signal but keeps an ignored one."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # Leave before interpreter finalisation, where the SDK may abort (sdk-python #300).
    # pytest has printed its summary and set the exit status by now.
    exit_now(int(getattr(config, "_tarry_exitstatus", 0)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._tarry_exitstatus = exitstatus  # type: ignore[attr-defined]


async def temporal_cli(client: Client, *args: str) -> str:
    """Runs the real `temporal` CLI against the test server; returns its standard output."""
    process = await asyncio.create_subprocess_exec(
        str(find_binary("temporal")),
        *args,
        "--address",
        client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def worker_process(
    client: Client,
    task_queue: str,
    model: ScriptedModel,
    workspace_root: Path,
    payload_store: Path,
    connection: Mapping[str, str] | None = None,
) -> asyncio.subprocess.Process:
    """`python -m workers` as its own process, configured from the environment, once
    it says it is ready. Its standard error is a pipe: read it or kill the process.
    `connection`: the `TEMPORAL_*` variables it connects with; by default the address of
    `client`'s server."""
    connection = connection or {"TEMPORAL_ADDRESS": client.service_client.config.target_host}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workers",
        env={
            "PATH": os.environ.get("PATH", ""),
            **connection,
            "TARRY_TASK_QUEUE": task_queue,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": CANARY_KEY,
            "TARRY_MODEL": "scripted",
            "TARRY_WORKSPACE_ROOT": str(workspace_root),
            "TARRY_STORAGE_DIR": str(payload_store),
        },
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert worker.stderr is not None
    async with asyncio.timeout(deadline(30)):
        while b"worker ready" not in await worker.stderr.readline():
            pass
    return worker


@pytest.fixture(scope="session")
def payload_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The payload store every test process shares, as a deployment's processes do."""
    return tmp_path_factory.mktemp("payloads")


@pytest.fixture(scope="session")
def converter(payload_store: Path) -> DataConverter:
    """The data converter every Tarry process builds, storing payloads over 256 KiB in
    `payload_store`; built from explicit settings, never from a developer's environment."""
    return data_converter(TarrySettings.model_construct(tarry_storage_dir=payload_store))


@pytest.fixture(scope="session")
async def temporal(converter: DataConverter) -> AsyncIterator[Client]:
    """The dev server `tarry.testing` gives users (`start_dev_server`), keeping its
    SQLite database in memory, as `temporal server start-dev` does unless told a file: a
    test's server outlives no process, and a file costs each step of a run its writes
    (synced, a 100-turn chat took 30 s against 7 s; unsynced, the 2,000-turn test's
    server still spent a seventh more CPU than in memory)."""
    env = await start_dev_server(converter)
    yield env.client
    await env.shutdown()


@pytest.fixture(scope="session")
async def pglite_url() -> AsyncIterator[str]:
    """The URL of this worker's PostgreSQL with pgvector (`bench/pglite.py`), started at
    its first use; skipped where PGlite is not installed (`scripts/test` installs it)."""
    if reason := pglite.missing():
        pytest.skip(f"the PostgreSQL tests need PGlite: {reason}")
    async with pglite.pglite(processes.free_port(), started_within=deadline(60)) as url:
        yield url


@pytest.fixture(params=search_stores.STORES)
def index_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The location of a search and memory store of each kind (`tests/search_stores.py`):
    a test that takes it runs once on each."""
    return search_stores.location_of(request, tmp_path)


@pytest.fixture(scope="session")
async def time_skipping(converter: DataConverter) -> AsyncIterator[Client]:
    """The Java test server: timers, timeouts and retry backoff pass in an instant
    while a test awaits a run's result."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=converter,
        test_server_existing_path=str(find_binary("temporal-test-server")),
    )
    # The Java test server can add search attributes but not list them.
    await add_search_attributes(env.client, "default")
    yield env.client
    await env.shutdown()


# Short enough that a cancelled model call or a dead worker is noticed within seconds. The
# attempts scale as the heartbeat does: they bound real work.
FAST_TIMEOUTS = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=deadline(30), tool=deadline(10))
MCP_TIMEOUTS = FAST_TIMEOUTS.model_copy(update={"tool": deadline(60)})
"""An agent with MCP servers: a run's first tool step lists their tools within half its
`tool` timeout, and a stdio server's process starts first. Under load (stress-ng, four
test workers) that passed 10 s."""


class Agent(ScriptedAgent):
    """A `ScriptedAgent` (`tarry.testing`) with what the suite asks of its runs' histories."""

    async def histories(self, run: RunHandle) -> list[WorkflowHistory]:
        """The history of every run of the run's continue-as-new chain, oldest first."""
        client = self.tarry.client
        description = await client.get_workflow_handle(run.id).describe()
        run_id = description.raw_description.workflow_execution_info.first_run_id
        histories: list[WorkflowHistory] = []
        while run_id:
            history = await client.get_workflow_handle(run.id, run_id=run_id).fetch_history()
            histories.append(history)
            handed_over = history.events[-1].workflow_execution_continued_as_new_event_attributes
            run_id = handed_over.new_execution_run_id
        return histories

    async def history_json(self, run: RunHandle) -> str:
        history = await self.tarry.client.get_workflow_handle(run.id).fetch_history()
        return history.to_json()

    async def event_types(self, run: RunHandle) -> list[str]:
        """The run's history as event type names, e.g. `ACTIVITY_TASK_SCHEDULED`."""
        history = await self.tarry.client.get_workflow_handle(run.id).fetch_history()
        return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]

    async def updates(self, run: RunHandle) -> list[str]:
        """The names of the updates the run's history accepted, in order (a rejected
        update leaves no trace in history)."""
        history = await self.tarry.client.get_workflow_handle(run.id).fetch_history()
        return [
            e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            for e in history.events
            if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]

    async def retries(self, run: RunHandle) -> list[tuple[int, str]]:
        """(attempt, error code before it) for each activity that needed more than one
        attempt; history records only the last attempt and the failure before it."""
        history = await self.tarry.client.get_workflow_handle(run.id).fetch_history()
        started = [e.activity_task_started_event_attributes for e in history.events]
        return [
            (s.attempt, s.last_failure.application_failure_info.type or s.last_failure.message)
            for s in started
            if s.attempt > 1
        ]


def tool_result(message: ChatMessage) -> Any:
    """The parsed `ToolResult` JSON of a tool message."""
    assert message.role == "tool"
    assert message.content is not None
    return json.loads(message.content)


@pytest.fixture
async def agent_factory(
    temporal: Client, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    """Starts agents (worker + scripted model) with the given profile settings."""
    started: list[Agent] = []
    async with AsyncExitStack() as stack:

        async def make(
            *,
            tools: Sequence[Tool] = (),
            client: Client | None = None,
            workflow_cache: int = DEFAULT_WORKFLOW_CACHE,
            mcp_servers: Mapping[str, McpServer] | None = None,
            more_profiles: Mapping[str, ModelProfile] | None = None,
            agents: Mapping[str, AgentSpec] | None = None,
            worker_settings: Mapping[str, Any] | None = None,
            **profile: Any,
        ) -> Agent:
            # Settings a test gives (a config file, say) are read and checked as a
            # worker's are.
            settings = (
                TarrySettings(tarry_workflow_cache=workflow_cache, **worker_settings)
                if worker_settings
                else TarrySettings.model_construct(tarry_workflow_cache=workflow_cache)
            )
            agent = Agent(
                client or temporal,
                tools=tools,
                agents=agents or {},
                mcp_servers=mcp_servers,
                profiles=more_profiles,
                settings=settings,
                timeouts=MCP_TIMEOUTS if mcp_servers else FAST_TIMEOUTS,
                directory=tmp_path,
                api_key=SecretStr(CANARY_KEY),
                **profile,
            )
            started.append(await stack.enter_async_context(agent))
            return agent

        yield make

        for agent in started:
            await _check_replay(agent, request)


@pytest.fixture
async def agent(agent_factory: Any) -> Agent:
    made: Agent = await agent_factory()
    return made


PROVIDERS = ("openai", "anthropic")
"""The dialects the scripted model speaks, as a profile's `provider` names them."""


# The fixtures every kind of caller's tests share. Their support modules import this one
# (for `Agent`), so each is imported where the fixture runs.


@pytest.fixture
def cli(agent: Agent) -> Cli:
    """The command line that the test's agent serves (`tests/cli.py`)."""
    from tests.cli import Cli

    return Cli.of(agent)


@pytest.fixture
async def gated(agent_factory: Callable[..., Awaitable[Agent]]) -> tuple[Cli, Gate]:
    """A command line whose worker also offers the `gate` tool: a run held mid-turn."""
    from tests.cli import Cli, Gate

    gate = Gate()
    agent = await agent_factory(tools=[gate.tool()])
    return Cli.of(agent), gate


@pytest.fixture
def api_access() -> Access:
    """Whom the `api` fixture's server lets in: by default anyone on loopback, no
    token. A module whose API has tokens or people overrides this fixture."""
    from tests.http_api import Access

    return Access.of()


@pytest.fixture
async def api(agent: Agent, api_access: Access) -> AsyncIterator[Api]:
    """The HTTP API over the test's agent, with `api_access` (`tests/http_api.py`)."""
    from tests.http_api import served

    async with served(agent, api_access) as api:
        yield api


@pytest.fixture(params=PROVIDERS)
async def provider_agent(agent_factory: Any, request: pytest.FixtureRequest) -> Agent:
    """An agent whose default profile speaks each provider's dialect in turn: a test
    that takes it specifies what a run does whichever provider answers."""
    made: Agent = await agent_factory(provider=request.param)
    return made


async def _check_replay(agent: Agent, request: pytest.FixtureRequest) -> None:
    """Every run a test started must replay without non-determinism, reading its stored
    payloads back and sandboxed as a worker does (tests/test_replay.py replays the
    recorded histories in the SDK's own sandbox, which imports `workflows` afresh for each)."""
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=agent.tarry.client.data_converter,
        workflow_runner=workflows_passed_through(None),
    )
    for i, run in enumerate(agent.runs):
        chain = await agent.histories(run)
        for segment, history in enumerate(chain):
            await replay(replayer, history)
            if request.config.getoption("--record-histories"):
                name = re.sub(r"\W+", "_", request.node.name)
                suffix = f"_{segment}" if len(chain) > 1 else ""
                HISTORIES.mkdir(exist_ok=True)
                (HISTORIES / f"{name}_{i}{suffix}.json").write_text(history.to_json())


@pytest.fixture(autouse=True)
def _no_inherited_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests configure models explicitly; a developer's real key must never be used.
    Every other setting is the shipped default (the workflow cache on) unless a test sets
    it: tests run what a deployment runs, whatever the developer's shell holds."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_", "TARRY_", "TEMPORAL_")):
            monkeypatch.delenv(name)
