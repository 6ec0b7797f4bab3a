"""`tarry search` and `tarry index rebuild`: the runs' messages by their words, and the
search index rebuilt from the runs themselves (`tarry.search`).

The command line reads the index (`TARRY_SEARCH_INDEX`) as an operator, as it reaches
Temporal: every run; with an embedding profile it embeds the query (hybrid search). The
HTTP API's `GET /v1/search` is the door that applies the deployment's rules, a run's
owner and shares: pointed at one (`TARRY_API_URL`, `TARRY_API_TOKEN`), `tarry search`
goes through it, as the token's person.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import httpx
import typer
from pydantic import BaseModel
from rich.table import Column, Table
from rich.text import Text

from tarry.cli.common import (
    AsJson,
    CliError,
    Panel,
    console,
    emit,
    run_command,
    with_tarry,
)
from tarry.config.settings import TarrySettings
from tarry.contracts import WORKFLOW_TYPE, ErrorCode
from tarry.contracts.search import (
    IndexedMessage,
    IndexedRun,
    IndexRequest,
    SearchHit,
    agent_of,
    indexed_text,
)
from tarry.core.errors import TarryError
from tarry.core.ownership import RunAccess
from tarry.search import SearchQuery, SearchStore, StoreOpener, since_of
from tarry.search.embed import Embedder
from tarry.temporal.entrypoint import settings_or_exit

if TYPE_CHECKING:
    from tarry.client import Tarry

__all__ = ["commands", "rebuild"]


commands = typer.Typer()
index_commands = typer.Typer(
    name="index",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="The search index of the runs' messages (`TARRY_SEARCH_INDEX`).",
)
commands.add_typer(index_commands, rich_help_panel=Panel.RUNS)


@commands.command(rich_help_panel=Panel.RUNS)
def search(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The words to find, all of them.")],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Only messages written since: a time ago (30m, 12h, 7d, 2w) or an ISO 8601"
            " date or time.",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", metavar="NAME", help="Only the runs of this sub-agent."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = 20,
    as_json: AsJson = False,
) -> None:
    """Find messages of every run by their words, and by meaning with an embedding
    profile, best first: the run, the message's place in its transcript (`tarry
    transcript RUN --start N`) and its words in context. Through `TARRY_API_URL` when
    set, as `TARRY_API_TOKEN`'s person: only the runs they may read."""
    settings = settings_or_exit()

    async def searched() -> list[SearchHit]:  # a --since it cannot read: one error line
        query = SearchQuery(text, since_of(since) if since else None, agent, limit=limit)
        return await _searched(settings, query)

    hits = run_command(searched())
    if as_json:
        emit(hits)
        return
    if not hits:
        console.print("No message has those words.")
        return
    console.print(_table(hits))


async def _searched(settings: TarrySettings, query: SearchQuery) -> list[SearchHit]:
    if settings.tarry_api_url is not None:
        return await _searched_over_api(settings, query)
    opener = StoreOpener(settings.tarry_search_index, settings.embedding_profile())
    try:
        return await opener.search(query)
    finally:
        await opener.aclose()


async def _searched_over_api(settings: TarrySettings, query: SearchQuery) -> list[SearchHit]:
    """`query` asked of `GET /v1/search`, as the person `TARRY_API_TOKEN` is; the API's
    refusal as its error."""
    token = settings.tarry_api_token
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    params: dict[str, str | int] = {"q": query.text, "limit": query.limit}
    if query.since is not None:
        params["since"] = query.since.isoformat()
    if query.agent is not None:
        params["agent"] = query.agent
    async with httpx.AsyncClient(base_url=str(settings.tarry_api_url)) as http:
        try:
            response = await http.get("/v1/search", params=params, headers=headers)
        except httpx.HTTPError as e:
            raise CliError(
                f"the API at TARRY_API_URL={settings.tarry_api_url} cannot be reached"
                f" ({type(e).__name__}: {e}); is it up? Unset TARRY_API_URL to read the"
                " index itself"
            ) from None
    if response.is_error:
        raise _refusal(response)
    return [SearchHit.model_validate(hit) for hit in response.json()["hits"]]


def _refusal(response: httpx.Response) -> Exception:
    """The API's error (`{"error": {"code", "message"}}`) as a `TarryError`; its status
    and text otherwise (a proxy's page, say)."""
    try:
        error = response.json()["error"]
        return TarryError(ErrorCode(error["code"]), f"the API answered: {error['message']}")
    except (ValueError, KeyError, TypeError):
        return CliError(f"the API answered {response.status_code}: {response.text[:300]}")


def _table(hits: list[SearchHit]) -> Table:
    table = Table(
        Column("run", no_wrap=True), Column("#", justify="right"), "role", "message", box=None
    )
    for hit in hits:
        table.add_row(hit.run_id, str(hit.index), hit.role, _marked(hit.snippet))
    return table


def _marked(snippet: str) -> Text:
    """The snippet with its matched words (`[word]`) in bold."""
    text = Text()
    for n, part in enumerate(snippet.replace("]", "[").split("[")):
        text.append(part, "bold" if n % 2 else "")
    return text


@index_commands.command("rebuild")
def rebuild_index(as_json: AsJson = False) -> None:
    """Rebuild the search index from the runs' histories and transcript pages: every run
    Temporal keeps, each read from a worker (as `tarry transcript` is). The index then
    holds what live indexing would have written."""
    settings = settings_or_exit()
    opener = StoreOpener(settings.tarry_search_index)
    profile = settings.embedding_profile()
    embedder = Embedder(profile) if profile is not None else None

    async def rebuilt(tarry: Tarry) -> Rebuilt:
        try:
            return await rebuild(tarry, await opener.store(), embedder)
        finally:
            await opener.aclose()
            if embedder is not None:
                await embedder.aclose()

    done = with_tarry(rebuilt)
    if as_json:
        emit(done)
        return
    console.print(f"Indexed {done.messages} messages of {done.runs} runs.")
    for run_id, reason in done.skipped.items():
        console.print(f"Skipped {run_id}: {reason}")


class Rebuilt(BaseModel):
    runs: int
    """The runs indexed again."""
    messages: int
    skipped: dict[str, str]
    """The runs that could not be read, with why: index them again once a worker serves
    them (`tarry index rebuild`)."""


async def rebuild(tarry: Tarry, store: SearchStore, embedder: Embedder | None = None) -> Rebuilt:
    """Empties `store` and indexes again the transcript of every run of the client's task
    queue, each message embedded with `embedder` if given: the counts of runs and
    messages indexed, and the runs `skipped` with why (no worker answers for them: index
    them again once one does). A message is dated by its run's start (its own time is not
    kept)."""
    started: dict[str, datetime] = {}
    access: dict[str, RunAccess] = {}
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = '{tarry.task_queue}'"
    async for execution in tarry.client.list_workflows(query):
        run_id = execution.id
        if run_id not in started or execution.start_time < started[run_id]:
            started[run_id] = execution.start_time
        access.setdefault(run_id, RunAccess.of(execution.typed_search_attributes))
    await store.clear()
    messages = 0
    skipped: dict[str, str] = {}
    for run_id, at in started.items():
        try:
            transcript = await tarry.get(run_id).transcript()
        except TarryError as e:
            skipped[run_id] = f"{e.code}: {e.message}"
            continue
        run = access[run_id]
        indexed = IndexedRun(
            run_id=run_id,
            owner=run.owner,
            readers=sorted(run.readers | run.writers),
            agent=agent_of(run_id),
        )
        request = IndexRequest(
            run=indexed,
            messages=[
                IndexedMessage(index=index, role=message.role, text=text, at=at)
                for index, message in enumerate(transcript)
                if (text := indexed_text(message))
            ],
        )
        vectors = None
        if embedder is not None:
            vectors = (await embedder.embed([m.text for m in request.messages])).vectors
        messages += await store.index(request, vectors)
    return Rebuilt(runs=len(started) - len(skipped), messages=messages, skipped=skipped)
