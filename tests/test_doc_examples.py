"""Every code block of the docs runs against a test stack, or says why it does not
(the conventions are in tests/doc_examples.py): a worker on the `tarry` task
queue with an echoing scripted model, shared by every block, the `tarry` command and
Python scripts pointed at it as a person's would be."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

from activities.tool_calls import BUILTIN_TOOLS
from tarry.client import Tarry
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import AgentSpec
from tarry.testing.scripted_model import ScriptedModel
from tests.cli import cli_env
from tests.conftest import CANARY_KEY
from tests.doc_examples import Block, Kind, Stack, collect, doc_blocks, run_block
from workers.plugin import TarryPlugin

TASK_QUEUE = "tarry"
"""The queue the docs' `temporal workflow start --task-queue tarry` lines name; no other
test's worker polls it."""

DOC_AGENTS = {
    "researcher": AgentSpec(description="Finds facts in the workspace.", tools=["list_files"])
}
"""The sub-agents the teams guide's blocks delegate to, as its config file declares them."""

BLOCKS = doc_blocks()
RUN = [block for block in BLOCKS if block.not_run is None]
NOT_RUN = [block for block in BLOCKS if block.not_run is not None]


@pytest.fixture(scope="module")
async def stack(
    temporal: Client, payload_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    model = ScriptedModel(when_exhausted="echo")
    await model.start()
    index = str(tmp_path_factory.mktemp("search") / "search.db")
    settings = TarrySettings.model_construct(
        tarry_workspace_root=tmp_path_factory.mktemp("workspaces"),
        tarry_storage_dir=payload_store,
        tarry_search_index=index,
    )
    profile = ModelProfile(base_url=model.base_url, model="scripted", api_key=SecretStr(CANARY_KEY))
    plugin = TarryPlugin(
        settings, tools=BUILTIN_TOOLS, profiles={"default": profile}, agents=DOC_AGENTS
    )
    address = temporal.service_client.config.target_host
    env = cli_env(address, TASK_QUEUE) | {
        "TARRY_STORAGE_DIR": str(payload_store),
        "TARRY_SEARCH_INDEX": index,
        # The `tarry` and `temporal` commands of this environment come first.
        "PATH": f"{Path(sys.executable).parent}:{cli_env(address, TASK_QUEUE)['PATH']}",
    }
    async with Worker(temporal, task_queue=TASK_QUEUE, plugins=[plugin]):
        yield Stack(Tarry(temporal, TASK_QUEUE), model, env)
    await plugin.aclose()
    await model.close()


@pytest.mark.parametrize("block", RUN, ids=str)
async def test_a_code_block_of_the_docs_runs(block: Block, stack: Stack) -> None:
    failure = await run_block(block, stack)

    assert failure is None, f"{block}: {failure}"


@pytest.mark.parametrize("block", NOT_RUN, ids=str)
def test_a_code_block_that_is_not_run_says_why(block: Block) -> None:
    reason = block.not_run or ""

    assert len(reason.split()) >= 2, f"{block}: not-run needs a reason, not a word"


def test_the_docs_run_blocks_of_every_kind() -> None:
    kinds = {block.kind for block in RUN}

    assert kinds >= {Kind.SCRIPT, Kind.FRAGMENT, Kind.SHELL, Kind.TOML, Kind.JSON}


async def test_a_broken_python_example_fails(stack: Stack) -> None:
    page = "Connect:\n\n```python\nfrom tarry import Tarry\n\nTarry.conect()\n```\n"
    [block] = collect(page, "broken.md")

    failure = await run_block(block, stack)

    assert failure is not None
    assert "AttributeError: type object 'Tarry' has no attribute 'conect'" in failure


async def test_a_broken_command_line_example_fails(stack: Stack) -> None:
    [block] = collect("```sh\ntarry status RUN --colour\n```\n", "broken.md")

    failure = await run_block(block, stack)

    assert failure is not None
    assert "No such option: --colour" in failure


async def test_a_config_example_with_a_misspelled_key_fails(stack: Stack) -> None:
    [block] = collect("```toml\n[profiles.fast]\nmodle = 'x'\n```\n", "broken.md")

    failure = await run_block(block, stack)

    assert failure is not None
    assert "unknown key 'modle' in [profiles.fast]; did you mean 'model'?" in failure


async def test_a_block_that_is_neither_runnable_nor_marked_fails(stack: Stack) -> None:
    [block] = collect("```sh\ncurl -s localhost:8234/healthz\n```\n", "unmarked.md")

    failure = await run_block(block, stack)

    assert failure is not None
    assert "<!-- not-run: REASON -->" in failure


def test_a_marker_before_the_fence_says_why_the_block_is_not_run() -> None:
    page = "<!-- not-run: needs an API key -->\n```sh\nOPENAI_API_KEY=sk-... tarry dev\n```\n"

    [block] = collect(page, "marked.md")

    assert block.not_run == "needs an API key"


def test_a_block_indented_in_a_list_item_is_collected() -> None:
    page = "- Start a run:\n\n    ```sh\n    tarry start hello\n    ```\n"

    [block] = collect(page, "list.md")

    assert (block.kind, block.code) == (Kind.SHELL, "tarry start hello\n")


def test_a_marker_applies_only_to_the_fence_right_after_it() -> None:
    page = "<!-- not-run: a diagram -->\n\nText.\n\n```mermaid\ngraph LR\n```\n"

    [block] = collect(page, "apart.md")

    assert block.not_run is None


async def test_a_block_s_model_marker_scripts_the_model_s_answers(stack: Stack) -> None:
    page = (
        '<!-- model: [{"content": "Forty-two."}] -->\n'
        "```python\n"
        'run = await tarry.start(RunInput(prompt="The answer?", mode=Mode.TASK))\n'
        'assert (await run.result()).output == "Forty-two."\n'
        "```\n"
    )
    [block] = collect(page, "scripted.md")

    failure = await run_block(block, stack)

    assert failure is None, failure
    assert stack.model.remaining == 0
