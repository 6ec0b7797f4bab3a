"""When a worker traces: the standard OpenTelemetry variables decide, as for any
OpenTelemetry program, and `TARRY_TRACING` can say so outright."""

from __future__ import annotations

import pytest

from tarry.config.settings import TarrySettings
from workers.telemetry import tracing_interceptors, tracing_on

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


def test_nothing_is_traced_when_no_variable_names_a_store() -> None:
    assert tracing_on(TarrySettings(), environ={}) is False


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_an_otlp_endpoint_turns_tracing_on(name: str) -> None:
    assert tracing_on(TarrySettings(), environ={name: "http://127.0.0.1:4318"}) is True


def test_tarry_tracing_says_so_outright_either_way() -> None:
    assert tracing_on(TarrySettings(tarry_tracing=True), environ={}) is True
    assert tracing_on(TarrySettings(tarry_tracing=False), environ=ENDPOINT) is False


def test_otel_sdk_disabled_turns_it_off_as_it_does_opentelemetry() -> None:
    disabled = ENDPOINT | {"OTEL_SDK_DISABLED": "true"}

    assert tracing_on(TarrySettings(tarry_tracing=True), environ=disabled) is False


def test_a_worker_given_an_endpoint_gets_the_tracing_interceptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("TARRY_TRACING", raising=False)

    [interceptor] = tracing_interceptors(TarrySettings())

    assert type(interceptor).__module__ == "workers.tracing"
