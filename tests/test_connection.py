"""Every Tarry process connects the Temporal way (`tarry.temporal.connection`): through a profile
file or the `TEMPORAL_*` variables, with TLS, a client certificate or an API key.

The TLS endpoint is real: the session's dev server behind a TLS-terminating proxy on
loopback that requires a client certificate of a CA made in the test (`tests/tls_proxy`),
so nothing reaches the server but through a handshake the proxy accepted. A connection
that cannot work says so in one line, naming the setting and the file, with exit code 2,
before anything starts."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.types import TextContent
from temporalio.client import Client

from tarry.contracts import Phase
from tarry.testing.scripted_model import ScriptedModel, say
from tests.cli import TARRY, Result, connected_env, finish
from tests.conftest import Agent, worker_process
from tests.deadline import TIMEOUT, deadline
from tests.test_config_errors import ENTRY_POINTS, refused, start
from tests.test_mcp_server import use
from tests.tls_proxy import Pki, TlsProxy, request_headers, tls_proxy

API_KEY = "tcld-canary-3f9a1c7e5b2d4"
"""The API key of the tests; it must show up nowhere but on the wire to the server."""


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


@pytest.fixture
async def mtls(temporal: Client, pki: Pki) -> AsyncIterator[TlsProxy]:
    """The dev server behind a proxy that requires a client certificate of `pki`'s CA."""
    async with tls_proxy(temporal.service_client.config.target_host, pki) as proxy:
        yield proxy


def profile_file(proxy: TlsProxy, pki: Pki, directory: Path) -> dict[str, str]:
    """A `temporal` CLI profile file naming the proxy and the certificates, and the
    variables that choose it."""
    path = directory / "temporal.toml"
    path.write_text(
        "[profile.default]\n"
        'address = "127.0.0.1:1"\n'
        "[profile.secure]\n"
        f'address = "{proxy.address}"\n'
        'namespace = "default"\n'
        "[profile.secure.tls]\n"
        f'server_ca_cert_path = "{pki.ca_file}"\n'
        f'client_cert_path = "{pki.client_cert_file}"\n'
        f'client_key_path = "{pki.client_key_file}"\n'
    )
    return {"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "secure"}


def variables(proxy: TlsProxy, pki: Pki, directory: Path) -> dict[str, str]:
    """The same connection as `TEMPORAL_*` variables, the client certificate as data."""
    return {
        "TEMPORAL_ADDRESS": proxy.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_file),
        "TEMPORAL_TLS_CLIENT_CERT_DATA": pki.client_cert_file.read_text(),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key_file),
    }


WAYS = {"a profile file": profile_file, "TEMPORAL_* variables": variables}


async def tarry(env: dict[str, str], *args: str) -> Result:
    process = await asyncio.create_subprocess_exec(
        str(TARRY),
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return await finish(process)


async def stop(worker: asyncio.subprocess.Process) -> str:
    """Stops a worker process; its log."""
    worker.send_signal(signal.SIGTERM)
    assert worker.stderr is not None
    logs = (await asyncio.wait_for(worker.stderr.read(), timeout=deadline(30))).decode()
    await worker.wait()
    return logs


@pytest.mark.parametrize("way", WAYS)
async def test_a_worker_and_the_cli_run_a_run_over_mtls(
    way: str, temporal: Client, mtls: TlsProxy, pki: Pki, tmp_path: Path, payload_store: Path
) -> None:
    connection = WAYS[way](mtls, pki, tmp_path)
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    env = connected_env(connection, queue) | {"TARRY_STORAGE_DIR": str(payload_store)}
    async with ScriptedModel([say("Hello over TLS."), say("Still here, encrypted.")]) as model:
        worker = await worker_process(
            temporal, queue, model, tmp_path / "workspaces", payload_store, connection
        )
        try:
            started = await tarry(env, "start", "--json", "Say hello.")
            run_id = json.loads(started.out)["run_id"]
            sent = await tarry(env, "send", run_id, "Are you there?")
            shown = await tarry(env, "show", run_id)
            doctor = await tarry(env, "doctor")
        finally:
            await stop(worker)

    assert (sent.code, sent.err) == (0, ""), sent
    assert "Still here, encrypted." in sent.out
    assert (shown.code, shown.err) == (0, ""), shown
    for text in ("Say hello.", "Hello over TLS.", "Are you there?", "Still here, encrypted."):
        assert text in shown.out
    assert doctor.code == 0, doctor
    tls_line = next(line for line in doctor.out.splitlines() if line.startswith("TLS "))
    assert "on (client certificate" in tls_line
    assert "CN=tarry-worker" in tls_line
    # The only address any of them had was the proxy's: each connected through it.
    assert len(mtls.received) >= 5
    handle = temporal.get_workflow_handle(run_id)
    assert (await handle.describe()).task_queue == queue


async def test_serve_and_mcp_each_answer_over_mtls(
    agent: Agent, mtls: TlsProxy, pki: Pki, tmp_path: Path, payload_store: Path
) -> None:
    agent.model.add(say("Served over TLS."), say("Answered over MCP."))
    connection = profile_file(mtls, pki, tmp_path)
    env = connected_env(connection, agent.tarry.task_queue)
    env["TARRY_STORAGE_DIR"] = str(payload_store)

    serve = await asyncio.create_subprocess_exec(
        str(TARRY), "serve", "--port", "0", env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert serve.stdout is not None
        line = await asyncio.wait_for(serve.stdout.readline(), timeout=deadline(30))
        url = line.decode().split()[3]  # "HTTP API on URL (docs ...)"
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as http:
            created = await http.post("/v1/runs", json={"prompt": "Serve me."})
            assert created.status_code == 201, created.text
            served = agent.tarry.get(created.json()["id"])
            agent.runs.append(served)
            await served.wait_for({Phase.WAITING_USER}, TIMEOUT)
            state = await http.get(f"/v1/runs/{served.id}")
    finally:
        serve.send_signal(signal.SIGINT)
        await asyncio.wait_for(serve.wait(), timeout=deadline(30))
    mcp = McpClient(StdioServerParameters(command=str(TARRY), args=["mcp"], env=env))
    async with mcp as client:
        started = await use(client, "start_run", prompt="Over MCP, please.")
        agent.runs.append(agent.tarry.get(started["run_id"]))
        waiting = await use(client, "run_state", run_id=started["run_id"], wait_seconds=30)

    assert state.status_code == 200
    assert state.json()["last_assistant_text"] == "Served over TLS."
    assert waiting["last_assistant_text"] == "Answered over MCP."


# --- What cannot work is one line, exit 2, and nothing started --------------------------


def wrong_ca(proxy: TlsProxy, pki: Pki, directory: Path) -> tuple[dict[str, str], str]:
    """A CA that did not sign the proxy's certificate; and what the line must name."""
    other = Pki(directory / "other")
    connection = variables(proxy, pki, directory)
    connection["TEMPORAL_TLS_SERVER_CA_CERT_PATH"] = str(other.ca_file)
    return connection, (
        "the server's certificate is not signed by the CA this process trusts; check "
        f"TEMPORAL_TLS_SERVER_CA_CERT_PATH ({other.ca_file})"
    )


def no_client_certificate(proxy: TlsProxy, pki: Pki, directory: Path) -> tuple[dict[str, str], str]:
    """TLS with the right CA, but no client certificate for a proxy that requires one."""
    connection = {
        "TEMPORAL_ADDRESS": proxy.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_file),
    }
    return connection, (
        "the server wants a client certificate of a CA it trusts and closed the connection; "
        "set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
    )


REFUSALS = {"a wrong CA": wrong_ca, "no client certificate": no_client_certificate}
REFUSED_BY = {
    "python -m workers": [sys.executable, "-m", "workers"],
    "tarry start": [str(TARRY), "start", "Never started."],
    "tarry serve": [str(TARRY), "serve", "--port", "0"],
    "tarry doctor": [str(TARRY), "doctor"],
}


@pytest.mark.parametrize("refusal", REFUSALS)
async def test_a_refused_tls_handshake_is_one_line_with_the_setting_and_exit_2(
    refusal: str, mtls: TlsProxy, pki: Pki, tmp_path: Path
) -> None:
    connection, reason = REFUSALS[refusal](mtls, pki, tmp_path)
    env = connected_env(connection, f"refused-{uuid.uuid4().hex[:8]}")
    expected = f"TLS with Temporal at {mtls.address} refused: {reason}"

    for name, command in REFUSED_BY.items():
        process = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        result = await finish(process)
        assert refused(result) == expected, name
        assert result.out == "", name  # no run id, no "HTTP API on", no report
    mcp = McpClient(StdioServerParameters(command=str(TARRY), args=["mcp"], env=env))
    async with mcp as client:
        # `tarry mcp` connects at its first tool call: that call is the one line.
        answer = await client.call_tool("waiting_runs", {})
    assert answer.is_error
    assert isinstance(answer.content[0], TextContent)
    assert expected in answer.content[0].text


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
async def test_a_missing_client_certificate_file_is_refused_at_the_start(
    entry_point: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "client.pem"

    line = refused(
        await start(
            entry_point,
            tmp_path,
            TEMPORAL_TLS_CLIENT_CERT_PATH=str(missing),
            TEMPORAL_TLS_CLIENT_KEY_PATH=str(missing.with_suffix(".key")),
        )
    )

    assert line == (
        f"TEMPORAL_TLS_CLIENT_CERT_PATH: cannot read {missing}: No such file or directory"
    )


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
async def test_a_profile_the_file_does_not_have_is_refused_at_the_start(
    entry_point: str, tmp_path: Path, pki: Pki
) -> None:
    proxy = TlsProxy("127.0.0.1:1")  # never connected to: the profile is refused first
    connection = profile_file(proxy, pki, tmp_path)

    line = refused(await start(entry_point, tmp_path, **connection | {"TEMPORAL_PROFILE": "prod"}))

    assert line == (
        f"TEMPORAL_PROFILE='prod': {connection['TEMPORAL_CONFIG_FILE']} has no "
        "[profile.prod]; its profiles are default, secure"
    )


async def test_a_certificate_in_the_profile_file_that_is_not_pem_names_the_file_and_key(
    tmp_path: Path, pki: Pki
) -> None:
    pki.client_cert_file.write_text("not a certificate\n")
    connection = profile_file(TlsProxy("127.0.0.1:1"), pki, tmp_path)

    line = refused(await start("python -m workers", tmp_path, **connection))

    assert line == (
        f"{connection['TEMPORAL_CONFIG_FILE']}: [profile.secure.tls] client_cert_path: "
        f"{pki.client_cert_file} holds no PEM certificate"
    )


def v1_client_certificate(pki: Pki, directory: Path) -> tuple[Path, Path]:
    """A client certificate of `pki`'s CA as a plain `openssl x509 -req` makes it: X.509
    v1, no extensions; and its key."""
    key, request, cert = (directory / name for name in ("v1.key", "v1.csr", "v1.pem"))
    commands: list[list[str | Path]] = [
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request,
         "-subj", "/CN=worker"],
        ["openssl", "x509", "-req", "-in", request, "-CA", pki.ca_file, "-CAkey", pki.ca_key_file,
         "-CAcreateserial", "-out", cert, "-days", "1"],
    ]  # fmt: skip
    for command in commands:
        subprocess.run(command, capture_output=True, check=True)
    return cert, key


async def test_a_v1_client_certificate_is_refused_at_the_start_as_such(
    tmp_path: Path, pki: Pki
) -> None:
    cert, key = v1_client_certificate(pki, tmp_path)

    line = refused(
        await start(
            "python -m workers",
            tmp_path,
            TEMPORAL_TLS_CLIENT_CERT_PATH=str(cert),
            TEMPORAL_TLS_CLIENT_KEY_PATH=str(key),
        )
    )

    assert line.startswith(
        f"TEMPORAL_TLS_CLIENT_CERT_PATH: {cert} is an X.509 v1 certificate, which TLS refuses"
    )
    assert "issue it as v3" in line


async def test_an_address_without_a_port_says_the_port_is_missing(tmp_path: Path) -> None:
    line = refused(await start("python -m workers", tmp_path, TEMPORAL_ADDRESS="localhost"), code=1)

    assert line == (
        "cannot reach Temporal at localhost: the address has no port; give host:port, e.g."
        " TEMPORAL_ADDRESS=localhost:7233 (Temporal's gRPC port)"
    )


# --- The API key ------------------------------------------------------------------


async def test_the_api_key_travels_as_the_sdk_sends_it_and_shows_nowhere_else(
    temporal: Client, pki: Pki, tmp_path: Path, payload_store: Path
) -> None:
    queue = f"api-key-{uuid.uuid4().hex[:8]}"
    upstream = temporal.service_client.config.target_host
    # Temporal Cloud's shape for API keys: TLS the server proves, a key the client sends.
    async with tls_proxy(upstream, pki, client_cert=False) as proxy:
        connection = {
            "TEMPORAL_ADDRESS": proxy.address,
            "TEMPORAL_API_KEY": API_KEY,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_file),
        }
        env = connected_env(connection, queue) | {"TARRY_STORAGE_DIR": str(payload_store)}
        async with ScriptedModel([say("Keyed in."), say("Still keyed in.")]) as model:
            worker = await worker_process(
                temporal, queue, model, tmp_path / "workspaces", payload_store, connection
            )
            try:
                started = await tarry(env, "start", "--json", "Use the key.")
                run_id = json.loads(started.out)["run_id"]
                sent = await tarry(env, "send", run_id, "Again.")
                doctor = await tarry(env, "doctor")
            finally:
                logs = await stop(worker)
        wrong = env | {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(Pki(tmp_path / "other").ca_file)}
        refusal = await tarry(wrong, "status", run_id)

    requests = [
        dict(block)
        for stream in proxy.received
        for block in request_headers(bytes(stream))
        if ":path" in dict(block)
    ]
    history = await temporal.get_workflow_handle(run_id).fetch_history()
    # Its events as stored, payloads as their own bytes (JSON, not base64 as in to_json).
    stored = b"".join(event.SerializeToString() for event in history.events)

    assert "Still keyed in." in sent.out
    # Every call of every process carried the key, as the SDK sends it.
    assert len(requests) > 10
    assert all(request.get("authorization") == f"Bearer {API_KEY}" for request in requests)
    assert "API key" in doctor.out  # doctor says there is one ...
    assert refusal.code == 2
    assert "refused" in refusal.err
    for seen in (started, sent, doctor, refusal):  # ... and no output shows it,
        assert API_KEY not in seen.out + seen.err
    assert API_KEY not in logs  # nor the worker's log,
    assert b"Use the key." in stored
    assert b"Still keyed in." in stored
    assert API_KEY.encode() not in stored  # nor the run's history.
