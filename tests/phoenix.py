"""Arize Phoenix as the real trace store of the tracing tests (`tests/test_traces.py`) and
of the observability guide's picture: `phoenix serve` as a process of its own, its
database in a directory of the test's, taking OTLP/HTTP at `/v1/traces` and answering
with the spans it stored through its REST API (`/v1/projects/{project}/spans`).

Each test sends its spans to a project of its own (the resource attribute
`openinference.project.name`, which Phoenix files spans under), so tests that share one
Phoenix read only their own spans.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tarry.cli.processes import HOST, free_port
from tests.browser import chromium
from tests.deadline import deadline

STARTUP = deadline(240)
"""Phoenix migrates its SQLite database at its first start: a minute or more on a busy machine."""
EXPORT_EVERY_MS = "100"
"""`OTEL_BSP_SCHEDULE_DELAY` of the tests' workers: spans reach the store soon after they end."""


@dataclass(frozen=True)
class Phoenix:
    url: str

    @property
    def otlp_endpoint(self) -> str:
        """`OTEL_EXPORTER_OTLP_ENDPOINT`: the SDK's exporter adds `/v1/traces`."""
        return self.url

    def worker_env(self, project: str, **more: str) -> dict[str, str]:
        """A tracing worker's environment, its spans filed under `project`."""
        return {
            "TARRY_TRACING": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_BSP_SCHEDULE_DELAY": EXPORT_EVERY_MS,
            **more,
        }

    async def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of `project` Phoenix stored, oldest first; none while it has none."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        async with httpx.AsyncClient(base_url=self.url, timeout=deadline(30)) as http:
            while True:
                params: dict[str, str | int] = {"limit": 1000, "sort": "start_time", "order": "asc"}
                if cursor:
                    params["cursor"] = cursor
                response = await http.get(f"/v1/projects/{project}/spans", params=params)
                if response.status_code == 404:  # no span of the project arrived yet
                    return []
                response.raise_for_status()
                page = response.json()
                found += page["data"]
                if not (cursor := page.get("next_cursor")):
                    return found

    async def project_id(self, project: str) -> str:
        """The id Phoenix's UI names `project` by in its addresses."""
        async with httpx.AsyncClient(base_url=self.url, timeout=deadline(30)) as http:
            response = await http.get(f"/v1/projects/{project}")
            response.raise_for_status()
            return str(response.json()["data"]["id"])


def shoot_trace(phoenix: Phoenix, project_id: str, trace_id: str, shown: str, out: Path) -> str:
    """The trace's page in Phoenix's UI, in headless Chromium, once it shows `shown`,
    as a PNG at `out`; the page's text."""
    url = f"{phoenix.url}/projects/{project_id}/traces/{trace_id}"
    with chromium(1600, 1300) as browser:
        browser.get(url)
        give_up = time.monotonic() + deadline(60)
        while shown not in (text := browser.find_element("tag name", "body").text):
            if time.monotonic() > give_up:
                raise TimeoutError(f"{url} never showed {shown!r}; it shows: {text[:500]}")
            time.sleep(0.2)
        time.sleep(deadline(2))  # the waterfall's bars are drawn after the names
        browser.save_screenshot(str(out))
        return str(browser.find_element("tag name", "body").text)


def new_project() -> str:
    return f"tarry-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def phoenix_server(directory: Path) -> AsyncIterator[Phoenix]:
    """`phoenix serve` on free ports, its working directory in `directory`, once it
    answers its health check; stopped on the way out."""
    port = free_port()
    grpc = free_port(avoid=[port])
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(directory),
        "PHOENIX_HOST": HOST,
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    phoenix = Path(sys.executable).parent / "phoenix"
    log = directory / "phoenix.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(phoenix), "serve", cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    server = Phoenix(f"http://{HOST}:{port}")
    try:
        await _healthy(server, process, log)
        yield server
    finally:
        process.terminate()
        try:
            async with asyncio.timeout(deadline(30)):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


async def _healthy(server: Phoenix, process: asyncio.subprocess.Process, log: Path) -> None:
    async with httpx.AsyncClient(timeout=deadline(5)) as http, asyncio.timeout(STARTUP):
        while True:
            if process.returncode is not None:
                said = await asyncio.to_thread(log.read_text)
                raise RuntimeError(f"phoenix serve exited: {said[-2000:]}")
            try:
                if (await http.get(f"{server.url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
