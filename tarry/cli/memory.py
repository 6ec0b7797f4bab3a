"""`tarry memory list|show|edit|rm`: the memories agents keep across runs
(`tarry.contracts.memories`), read, corrected and deleted by a person.

The command line reads the memory store (`TARRY_SEARCH_INDEX`) as an operator, as it
reaches Temporal: every scope. The HTTP API's `/v1/memories` is the door that applies
the deployment's rules (a person's own scope and their groups'; admins all), and the
inbox's Memories page stands on it.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, TypeVar

import typer
from pydantic import ValidationError
from rich.table import Column, Table

from tarry.cli.common import AsJson, Panel, console, emit, fail, output, run_command
from tarry.contracts.memories import Memory, MemoryEdit
from tarry.core.identities import local_user
from tarry.search import MemoryStore, StoreOpener
from tarry.search.memory_store import visible
from tarry.temporal.entrypoint import settings_or_exit

__all__ = ["commands"]

T = TypeVar("T")

commands = typer.Typer()
memory_commands = typer.Typer(
    name="memory",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="The memories agents keep across runs (`TARRY_SEARCH_INDEX`): list, show, edit, rm.",
)
commands.add_typer(memory_commands, rich_help_panel=Panel.MEMORY)

MemoryId = Annotated[
    str, typer.Argument(metavar="ID", help="The memory's id, as `tarry memory list` shows it.")
]


def _opener() -> StoreOpener:
    """The environment's store, with its embedding profile (an edited text's vector)."""
    settings = settings_or_exit()
    return StoreOpener(settings.tarry_search_index, settings.embedding_profile())


def _with_store(
    action: Callable[[MemoryStore], Awaitable[T]], opener: StoreOpener | None = None
) -> T:
    """`action` on the environment's memory store (`opener`'s), its errors one line each."""
    opener = opener or _opener()

    async def use() -> T:
        try:
            return await action(await opener.store())
        finally:
            await opener.aclose()

    return run_command(use())


def _found(memory_id: str) -> Callable[[Memory | None], Memory]:
    return lambda memory: visible(memory, memory_id, None)


@memory_commands.command("list")
def list_memories(
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            metavar="SCOPE",
            help="Only this scope's: a user, group:NAME or agent:NAME; repeated for more.",
        ),
    ] = None,
    find: Annotated[
        str | None,
        typer.Option("--find", metavar="WORDS", help="Only those with any of these words."),
    ] = None,
    deleted: Annotated[bool, typer.Option("--deleted", help="Deleted ones too.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = 50,
    as_json: AsJson = False,
) -> None:
    """The memories of every scope (or those of --scope), newest first; with --find,
    those a run's `recall` of the words would find, best first."""
    scopes = set(scope) if scope else None

    async def listed(store: MemoryStore) -> list[Memory]:
        if find is not None:
            return await store.recall(find, scopes, limit)
        return await store.list_memories(scopes, limit, deleted=deleted)

    found = _with_store(listed)
    if as_json:
        emit(found)
        return
    if not found:
        console.print("No memories.")
        return
    table = Table(Column("id", no_wrap=True), "scope", "text", "tags", "remembered", box=None)
    for m in found:
        text = f"{m.text} (deleted)" if m.deleted else m.text
        table.add_row(m.id, m.scope, text, ", ".join(m.tags), _when(m.created))
    console.print(table)


@memory_commands.command("show")
def show(memory_id: MemoryId, as_json: AsJson = False) -> None:
    """One memory, with where it came from: the run, the turn and who approved it; who
    edited or deleted it, and when."""
    memory = _with_store(lambda store: _get(store, memory_id))
    output(memory, as_json, _details(memory))


async def _get(store: MemoryStore, memory_id: str) -> Memory:
    return _found(memory_id)(await store.get(memory_id))


@memory_commands.command("edit")
def edit(
    memory_id: MemoryId,
    text: Annotated[str | None, typer.Option("--text", help="Its new text.")] = None,
    tags: Annotated[
        str | None,
        typer.Option("--tags", metavar="TAGS", help="Its new tags, comma-separated (`` clears)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Correct a memory's text or tags; later runs recall it as it is now."""
    if text is None and tags is None:
        fail("give --text, --tags or both", exit_code=2)
    try:
        change = MemoryEdit(
            text=text,
            tags=None if tags is None else [t.strip() for t in tags.split(",") if t.strip()],
        )
    except ValidationError as e:
        fail(f"--text: {e.errors()[0]['msg']}", exit_code=2)
    by = local_user(os.environ.get("TARRY_USER"))
    opener = _opener()

    async def edited(store: MemoryStore) -> Memory:
        vector = None if change.text is None else await opener.embedding_of(change.text)
        done = await store.edit(memory_id, by, text=change.text, tags=change.tags, vector=vector)
        return _found(memory_id)(done)

    memory = _with_store(edited, opener)
    output(memory, as_json, _details(memory))


@memory_commands.command("rm")
def rm(memory_id: MemoryId, as_json: AsJson = False) -> None:
    """Delete a memory: no run recalls it again; `tarry memory show` still shows where it
    came from, and who deleted it."""
    by = local_user(os.environ.get("TARRY_USER"))

    async def forgotten(store: MemoryStore) -> Memory:
        return _found(memory_id)(await store.forget(memory_id, by))

    memory = _with_store(forgotten)
    output(memory, as_json, f"Deleted {memory.id}.")


def _details(memory: Memory) -> Table:
    """A memory's fields, one a line; its provenance as `run R, turn T, approved by A`."""
    table = Table(Column(style="bold", no_wrap=True), Column(), box=None, show_header=False)
    source = memory.provenance
    came = f"run {source.run_id}, turn {source.turn}" if source.run_id else "written by a person"
    rows = [
        ("id", memory.id),
        ("scope", memory.scope),
        ("text", memory.text),
        ("tags", ", ".join(memory.tags) or "-"),
        ("from", came),
        ("approved by", source.approved_by or "nobody was asked"),
        ("remembered", _when(memory.created)),
    ]
    if memory.edited is not None:
        rows.append(("edited", f"{_when(memory.edited)} by {memory.edited_by}"))
    if memory.deleted is not None:
        rows.append(("deleted", f"{_when(memory.deleted)} by {memory.deleted_by}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")
