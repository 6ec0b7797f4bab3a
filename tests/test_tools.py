"""The tool host: schemas from signatures, validation, error mapping and workspace confinement.

Tool calls run through Temporal's own activity test environment where the test is
about the activity, and through `ToolHost.invoke` directly for the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities.tool_calls import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolError,
    ToolHost,
    list_files,
    read_file,
    tool,
    write_file,
)
from tarry.config.settings import TarrySettings
from tarry.contracts import (
    CATALOGUE_CHECK_ACTIVITY,
    CHECKED_CATALOGUE_ACTIVITY,
    FINISH_TOOL,
    TOOL_CATALOGUE_ACTIVITY,
    CatalogueRequest,
    ErrorCode,
    Phase,
    ToolDefinition,
    ToolInvocation,
    ToolResult,
)
from tarry.contracts.previews import PREVIEW_ACTIVITY
from tarry.core.tools import MAX_READ_BYTES
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT
from workers.plugin import TarryPlugin

RUN_ID = "run-1"


def invocation(arguments: str, run_id: str = RUN_ID) -> ToolInvocation:
    return ToolInvocation(run_id=run_id, call_id="call-1", arguments=arguments)


def activity_named(host: ToolHost, name: str) -> Callable[..., Any]:
    for fn in host.activities():
        defn = activity._Definition.from_callable(fn)
        if defn is not None and defn.name == name:
            return fn
    raise LookupError(name)


async def run_activity(host: ToolHost, name: str, arguments: str) -> ToolResult:
    """Call a tool the way a worker does: as the activity named after it."""
    result = await ActivityEnvironment().run(activity_named(host, name), invocation(arguments))
    assert isinstance(result, ToolResult)
    return result


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def assert_failed(result: ToolResult, code: ErrorCode) -> str:
    assert not result.ok
    assert result.error is not None
    assert result.error.code == code
    return result.error.message


@pytest.fixture
def host(tmp_path: Path) -> ToolHost:
    return ToolHost(tmp_path / "workspaces")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The workspace of RUN_ID, made up front so tests can plant files and symlinks in it."""
    path = tmp_path / "workspaces" / RUN_ID
    path.mkdir(parents=True)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace root, which no tool may reach."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret")
    return path


@tool
def search(ctx: ToolContext, query: str, limit: int = 10, exact: bool | None = None) -> str:
    """Search the notes.

    Everything after the first paragraph is for programmers, not for the model.
    """
    return query


# --- Schemas ----------------------------------------------------------------


def test_schema_comes_from_signature() -> None:
    parameters = search.definition().parameters
    assert set(parameters["properties"]) == {"query", "limit", "exact"}
    assert parameters["required"] == ["query"]
    assert parameters["properties"]["limit"]["default"] == 10
    assert parameters["properties"]["limit"]["type"] == "integer"
    assert parameters["additionalProperties"] is False


def test_tool_context_is_injected_not_in_schema() -> None:
    assert search.context_param == "ctx"
    assert "ctx" not in search.arguments.model_fields


def test_a_definition_describes_the_tool_with_the_docstrings_first_paragraph() -> None:
    definition = search.definition()
    assert definition.name == "search"
    assert definition.description == "Search the notes."
    assert (definition.idempotent, definition.needs_approval) == (True, False)


def test_decorator_takes_a_name_and_description() -> None:
    @tool(name="lookup", description="Look something up.")
    def find(term: str) -> str:
        return term

    assert isinstance(find, Tool)
    assert find.definition().name == "lookup"
    assert find.definition().description == "Look something up."


def test_list_files_path_defaults_to_workspace_root() -> None:
    parameters = list_files.definition().parameters
    assert parameters["properties"]["path"]["default"] == "."
    assert "required" not in parameters


def test_variadic_parameters_are_refused() -> None:
    def variadic(*paths: str) -> None:
        return None

    with pytest.raises(TypeError, match="paths"):
        tool(variadic)


# --- The host ---------------------------------------------------------------


def test_names_are_the_registered_tools_and_finish(host: ToolHost) -> None:
    assert host.names == ["read_file", "write_file", "list_files", FINISH_TOOL]


def names_of(tools: list[ToolDefinition]) -> list[str]:
    return [t.name for t in tools]


def test_the_catalogue_respects_the_allowed_list_and_always_includes_finish(
    host: ToolHost,
) -> None:
    allowed = host.catalogue(CatalogueRequest(tools=["list_files", "read_file", "nope"]))
    assert names_of(allowed) == ["read_file", "list_files", FINISH_TOOL]
    assert names_of(host.catalogue(CatalogueRequest(tools=[]))) == [FINISH_TOOL]


def test_a_catalogue_of_none_offers_every_tool(host: ToolHost) -> None:
    catalogue = host.catalogue(CatalogueRequest())
    assert names_of(catalogue) == host.names
    assert catalogue[-1].parameters["required"] == ["result"]


def test_the_catalogue_gates_the_tools_the_run_names_and_those_that_ask_for_it(
    tmp_path: Path,
) -> None:
    @tool(approval=True)
    def pay(amount: int) -> str:
        return "paid"

    @tool(idempotent=False)
    def send_mail(to: str) -> str:
        return "sent"

    host = ToolHost(tmp_path, [read_file, write_file, pay, send_mail])
    catalogue = host.catalogue(CatalogueRequest(require_approval=["write_file"]))

    gated = [t.name for t in catalogue if t.needs_approval]
    assert gated == ["write_file", "pay"]
    assert [t.name for t in catalogue if not t.idempotent] == ["send_mail"]
    everything = host.catalogue(CatalogueRequest(require_approval=["*"]))
    assert [t.name for t in everything if not t.needs_approval] == [FINISH_TOOL]


def test_register_rejects_a_duplicate_name(host: ToolHost) -> None:
    with pytest.raises(ValueError, match="already registered"):
        host.register(read_file)


def test_register_rejects_finish(tmp_path: Path) -> None:
    @tool(name=FINISH_TOOL)
    def finish(result: str) -> str:
        return result

    with pytest.raises(ValueError, match="reserved"):
        ToolHost(tmp_path, tools=[finish])


def test_each_tool_is_an_activity_named_after_it_beside_the_catalogue_its_check_and_previews(
    host: ToolHost,
) -> None:
    names = []
    for fn in host.activities():
        defn = activity._Definition.from_callable(fn)
        assert defn is not None
        names.append(defn.name)
    expected = [
        TOOL_CATALOGUE_ACTIVITY,
        CATALOGUE_CHECK_ACTIVITY,
        CHECKED_CATALOGUE_ACTIVITY,
        PREVIEW_ACTIVITY,
        *(t.name for t in BUILTIN_TOOLS),
    ]
    assert names == expected


# --- Built-in tools through their activities --------------------------------


async def test_write_then_read_round_trip(host: ToolHost, tmp_path: Path) -> None:
    written = await run_activity(host, "write_file", '{"path": "notes/a.txt", "content": "héllo"}')
    assert written.ok
    assert written.data == {"path": "notes/a.txt", "bytes": 6}
    assert (tmp_path / "workspaces" / RUN_ID / "notes" / "a.txt").read_text() == "héllo"

    read = await run_activity(host, "read_file", '{"path": "notes/a.txt"}')
    assert read.ok
    assert read.data == "héllo"


async def test_list_files_marks_directories(host: ToolHost, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "b.txt").write_text("b")
    (workspace / "a.txt").write_text("a")
    result = await run_activity(host, "list_files", "{}")
    assert result.ok
    assert result.data == ["a.txt", "b.txt", "src/"]


async def test_read_of_a_missing_file_fails_clearly(host: ToolHost) -> None:
    result = await run_activity(host, "read_file", '{"path": "missing.txt"}')
    assert assert_failed(result, ErrorCode.TOOL_FAILED) == "no such file: missing.txt"


async def test_read_of_a_directory_fails_clearly(host: ToolHost, workspace: Path) -> None:
    (workspace / "src").mkdir()
    result = await run_activity(host, "read_file", '{"path": "src"}')
    assert "is a directory" in assert_failed(result, ErrorCode.TOOL_FAILED)


@pytest.fixture
def capped(tmp_path: Path) -> ToolHost:
    """A host whose reads return at most 10 bytes."""
    return ToolHost(tmp_path / "workspaces", max_read_bytes=10)


async def test_a_read_over_the_cap_says_the_files_size_and_how_to_read_parts(
    capped: ToolHost, workspace: Path
) -> None:
    (workspace / "log.txt").write_text("0123456789" * 3)

    result = await run_activity(capped, "read_file", '{"path": "log.txt"}')

    message = assert_failed(result, ErrorCode.TOOL_FAILED)
    assert message == (
        "log.txt has 30 bytes; one read returns at most 10. Read it in parts:"
        " offset=0, limit=10, then offset=10, and so on"
    )
    assert result.error is not None
    assert result.error.details == {"bytes": 30, "max_read_bytes": 10}


async def test_a_file_over_the_cap_is_read_in_parts_by_offset_and_limit(
    capped: ToolHost, workspace: Path
) -> None:
    (workspace / "log.txt").write_text("first line\nsecond one\nthird")

    parts = [
        await run_activity(capped, "read_file", json.dumps({"path": "log.txt", **part}))
        for part in ({"limit": 10}, {"offset": 10, "limit": 10}, {"offset": 20})
    ]

    assert [part.data for part in parts] == ["first line", "\nsecond on", "e\nthird"]


async def test_a_part_asked_larger_than_the_cap_is_refused(
    capped: ToolHost, workspace: Path
) -> None:
    (workspace / "log.txt").write_text("0123456789" * 3)

    result = await run_activity(capped, "read_file", '{"path": "log.txt", "limit": 11}')

    assert "one read returns at most 10" in assert_failed(result, ErrorCode.TOOL_FAILED)


def test_read_files_offset_and_limit_are_optional() -> None:
    parameters = read_file.definition().parameters

    assert parameters["required"] == ["path"]
    assert set(parameters["properties"]) == {"path", "offset", "limit"}


async def test_the_workers_read_file_cap_comes_from_its_settings(
    tmp_path: Path, workspace: Path
) -> None:
    settings = TarrySettings.model_construct(
        tarry_workspace_root=tmp_path / "workspaces", tarry_read_file_max_bytes=4
    )
    plugin = TarryPlugin(settings, profiles={})
    (workspace / "a.txt").write_text("hello")

    try:
        result = await plugin.tools.invoke("read_file", invocation('{"path": "a.txt"}'))
    finally:
        await plugin.aclose()

    assert "a.txt has 5 bytes; one read returns at most 4" in assert_failed(
        result, ErrorCode.TOOL_FAILED
    )


async def test_a_run_reads_a_file_over_the_cap_in_parts(agent: Agent) -> None:
    """The model reads the refusal, with the file's size, and reads a part instead."""
    big = "x" * MAX_READ_BYTES + "THE END"
    agent.model.add(
        call("read_file", {"path": "big.log"}),
        call("read_file", {"path": "big.log", "offset": MAX_READ_BYTES}),
        say("It ends with THE END."),
    )
    workspace = agent.workspace_root / "run-big-file"
    workspace.mkdir(parents=True)
    (workspace / "big.log").write_text(big)

    run = await agent.start("How does big.log end?", run_id="run-big-file")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    refused, part = [tool_result(m) for m in await run.transcript() if m.role == "tool"]
    assert refused["error"]["code"] == ErrorCode.TOOL_FAILED
    assert refused["error"]["message"].startswith(f"big.log has {len(big)} bytes;")
    assert part == {"ok": True, "data": "THE END"}


async def test_a_run_id_that_escapes_the_root_is_forbidden(host: ToolHost, tmp_path: Path) -> None:
    fn = activity_named(host, "write_file")
    args = '{"path": "x.txt", "content": "x"}'
    result = await ActivityEnvironment().run(fn, invocation(args, run_id="../escaped"))
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)
    assert not (tmp_path / "escaped").exists()


# --- Argument errors --------------------------------------------------------


async def test_arguments_that_are_not_json_are_invalid(host: ToolHost) -> None:
    result = await run_activity(host, "read_file", "{path: a.txt")
    message = assert_failed(result, ErrorCode.TOOL_INVALID_ARGUMENTS)
    assert message.startswith("arguments are not valid JSON")


async def test_arguments_that_are_not_an_object_are_invalid(host: ToolHost) -> None:
    result = await host.invoke("read_file", invocation('["a.txt"]'))
    assert "JSON object" in assert_failed(result, ErrorCode.TOOL_INVALID_ARGUMENTS)


async def test_schema_mismatch_is_invalid_with_details(host: ToolHost) -> None:
    result = await host.invoke("write_file", invocation('{"path": 3, "extra": 1}'))
    message = assert_failed(result, ErrorCode.TOOL_INVALID_ARGUMENTS)
    assert "content: Field required" in message
    assert result.error is not None
    assert result.error.details is not None
    errors = result.error.details["errors"]
    assert {(tuple(e["loc"]), e["type"]) for e in errors} == {
        (("path",), "string_type"),
        (("content",), "missing"),
        (("extra",), "extra_forbidden"),
    }
    # The details must survive the trip through history as JSON.
    assert ToolResult.model_validate_json(result.model_dump_json()) == result


async def test_unknown_tool_is_not_found(host: ToolHost) -> None:
    result = await host.invoke("delete_everything", invocation("{}"))
    assert "delete_everything" in assert_failed(result, ErrorCode.TOOL_NOT_FOUND)


# --- Confinement to the workspace -------------------------------------------


@pytest.mark.parametrize("path", ["../outside/secret.txt", "notes/../a.txt", ".."])
async def test_dot_dot_is_forbidden(host: ToolHost, workspace: Path, path: str) -> None:
    (workspace / "a.txt").write_text("inside")
    result = await run_activity(host, "read_file", f'{{"path": "{path}"}}')
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)


async def test_absolute_path_is_forbidden(host: ToolHost, workspace: Path) -> None:
    (workspace / "a.txt").write_text("inside")
    result = await run_activity(host, "read_file", f'{{"path": "{workspace / "a.txt"}"}}')
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)


async def test_nul_byte_in_path_is_forbidden(host: ToolHost) -> None:
    result = await host.invoke("read_file", invocation('{"path": "a\\u0000.txt"}'))
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)


async def test_reading_through_a_symlink_out_is_forbidden(
    host: ToolHost, workspace: Path, outside: Path
) -> None:
    (workspace / "link").symlink_to(outside)
    result = await run_activity(host, "read_file", '{"path": "link/secret.txt"}')
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)
    assert result.data is None


async def test_writing_through_a_symlink_out_is_forbidden(
    host: ToolHost, workspace: Path, outside: Path
) -> None:
    (workspace / "link").symlink_to(outside)
    (workspace / "file-link").symlink_to(outside / "secret.txt")
    for path in ("link/new.txt", "file-link"):
        args = f'{{"path": "{path}", "content": "pwned"}}'
        assert_failed(await run_activity(host, "write_file", args), ErrorCode.TOOL_FORBIDDEN)
    assert names_in(outside) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_listing_through_a_symlink_out_is_forbidden(
    host: ToolHost, workspace: Path, outside: Path
) -> None:
    (workspace / "link").symlink_to(outside)
    result = await run_activity(host, "list_files", '{"path": "link"}')
    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)


async def test_reading_a_hard_link_to_a_file_outside_is_forbidden(
    host: ToolHost, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")

    result = await run_activity(host, "read_file", '{"path": "notes.txt"}')

    assert "top secret" not in assert_failed(result, ErrorCode.TOOL_FORBIDDEN)


async def test_writing_a_hard_link_to_a_file_outside_is_forbidden(
    host: ToolHost, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")

    result = await run_activity(
        host, "write_file", json.dumps({"path": "notes.txt", "content": "overwritten"})
    )

    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.parametrize(
    "path", ["a" * 300, "/".join(["deep"] * 300)], ids=["long name", "long path"]
)
async def test_very_long_paths_are_forbidden(host: ToolHost, workspace: Path, path: str) -> None:
    result = await run_activity(host, "write_file", json.dumps({"path": path, "content": "x"}))

    assert_failed(result, ErrorCode.TOOL_FORBIDDEN)
    assert names_in(workspace) == []


async def test_a_symlink_within_the_workspace_is_followed(host: ToolHost, workspace: Path) -> None:
    (workspace / "real.txt").write_text("real")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    result = await run_activity(host, "read_file", '{"path": "alias.txt"}')
    assert result.ok
    assert result.data == "real"


# --- Custom tools -----------------------------------------------------------


class Note(BaseModel):
    title: str
    tags: list[str]


async def test_a_raising_tool_fails_with_its_message(tmp_path: Path) -> None:
    @tool
    def explode() -> None:
        raise ValueError("boom")

    result = await ToolHost(tmp_path, [explode]).invoke("explode", invocation("{}"))
    assert assert_failed(result, ErrorCode.TOOL_FAILED) == "ValueError: boom"


async def test_a_tool_error_keeps_its_code_and_details(tmp_path: Path) -> None:
    @tool
    def guarded() -> None:
        raise ToolError(ErrorCode.TOOL_FORBIDDEN, "not today", {"retry": False})

    result = await ToolHost(tmp_path, [guarded]).invoke("guarded", invocation("{}"))
    assert assert_failed(result, ErrorCode.TOOL_FORBIDDEN) == "not today"
    assert result.error is not None
    assert result.error.details == {"retry": False}


async def test_an_async_tool_is_awaited(tmp_path: Path) -> None:
    @tool
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    host = ToolHost(tmp_path, [double])
    result = await ActivityEnvironment().run(
        activity_named(host, "double"), invocation('{"n": 21}')
    )
    assert result.ok
    assert result.data == 42


async def test_a_returned_model_becomes_json(tmp_path: Path) -> None:
    @tool
    def make_note(title: str) -> Note:
        return Note(title=title, tags=["x"])

    result = await ToolHost(tmp_path, [make_note]).invoke("make_note", invocation('{"title": "t"}'))
    assert result.ok
    assert result.data == {"title": "t", "tags": ["x"]}


async def test_cancelling_the_activity_cancels_the_tool(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> None:
        started.set()
        await asyncio.Event().wait()

    env = ActivityEnvironment()
    fn = activity_named(ToolHost(tmp_path, [wait_forever]), "wait_forever")
    task = asyncio.ensure_future(env.run(fn, invocation("{}")))
    await started.wait()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
