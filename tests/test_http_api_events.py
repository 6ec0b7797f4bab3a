"""`GET /v1/runs/{id}/events`: the run's events as server-sent events, live, resumable
across continue-as-new, and shared by many streams on one run."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psutil

from tarry.contracts.events import EventKind
from tarry.testing.scripted_model import say
from tests.deadline import deadline
from tests.http_api import Api

LONG = " ".join(f"word{i}" for i in range(60))


def words(events: list[tuple[str, Any, str]]) -> str:
    return "".join(data.get("text", "") for kind, data, _ in events if kind == EventKind.TEXT)


async def read_until_stop(api: Api, path: str, **headers: str) -> list[tuple[str, Any, str]]:
    seen = []
    async with asyncio.timeout(deadline(60)):
        async for event in api.events(path, **headers):
            seen.append(event)
            if event[0] == EventKind.STOP:
                return seen
    raise AssertionError(f"the stream ended before a stop: {seen}")


async def test_events_show_the_words_before_the_answer_ends(api: Api) -> None:
    api.agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.1))  # about 6 s of writing
    run_id = await api.start("talk to me")
    seen: list[tuple[str, Any, str]] = []
    still_writing = None

    async with asyncio.timeout(deadline(60)):
        async for event in api.events(f"/v1/runs/{run_id}/events"):
            seen.append(event)
            if still_writing is None and event[0] == EventKind.TEXT:
                still_writing = not api.agent.model.requests[0].settled.is_set()
            if event[0] == EventKind.STOP:
                break

    assert still_writing
    assert words(seen) == LONG
    assert [kind for kind, _, _ in seen[:2]] == [EventKind.MESSAGE, EventKind.ANSWER]
    assert [int(id) for _, _, id in seen] == [data["offset"] for _, data, _ in seen]
    assert seen[-1][1]["state"]["phase"] == "WaitingUser"


async def test_the_event_stream_ends_after_the_run_ends(api: Api) -> None:
    run_id = await api.start()
    await api.http.post(f"/v1/runs/{run_id}/stop", json={})

    async with asyncio.timeout(deadline(60)):
        seen = [event async for event in api.events(f"/v1/runs/{run_id}/events")]

    assert seen[-1][0] == EventKind.STOP
    assert seen[-1][1]["state"]["phase"] == "Completed"


async def test_last_event_id_resumes_across_a_continue_as_new_and_misses_nothing(
    api: Api,
) -> None:
    answers = [f"answer number {n}, " * 8 for n in range(3)]
    api.agent.model.add(*(say(text, chunk_chars=7, chunk_delay=0.03) for text in answers))
    run_id = await api.start("go", continue_as_new_after_turns=1)
    path = f"/v1/runs/{run_id}/events"
    before = await read_until_stop(api, path)
    # Away while the run answers twice more and hands its state over each time.
    for n in (1, 2):
        await api.http.post(f"/v1/runs/{run_id}/messages?wait=true", json={"text": f"reply {n}"})
    await api.http.post(f"/v1/runs/{run_id}/stop", json={})

    async with asyncio.timeout(deadline(60)):
        after = [e async for e in api.events(path, **{"Last-Event-ID": before[-1][2]})]

    handle = await api.agent.tarry.client.get_workflow_handle(run_id).describe()
    assert handle.raw_description.workflow_execution_info.first_run_id != handle.run_id
    seen = before + after
    offsets = [int(id) for _, _, id in seen if id]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    by_turn = [words([e for e in seen if e[1].get("turn") == turn]) for turn in (1, 2, 3)]
    assert by_turn == answers
    messages = [data["index"] for kind, data, _ in seen if kind == EventKind.MESSAGE]
    assert messages == list(range(len(await api.run(run_id).transcript())))


async def test_after_resumes_like_last_event_id(api: Api) -> None:
    api.agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.01))
    run_id = await api.start("talk to me")
    whole = await read_until_stop(api, f"/v1/runs/{run_id}/events")
    middle = len(whole) // 2

    rest = await read_until_stop(api, f"/v1/runs/{run_id}/events?after={whole[middle][2]}")

    assert rest == whole[middle + 1 :]


async def test_a_hundred_streams_on_one_run_all_receive_the_whole_answer(api: Api) -> None:
    api.agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.05))  # about 3 s of writing
    run_id = await api.start("talk to us all")
    memory_before = psutil.Process(os.getpid()).memory_info().rss

    streams = [read_until_stop(api, f"/v1/runs/{run_id}/events") for _ in range(100)]
    answers = await asyncio.gather(*streams)

    memory_after = psutil.Process(os.getpid()).memory_info().rss
    print(
        f"100 event streams on one run: API process (with the test's worker) "
        f"{memory_before / 2**20:.0f} MiB before, {memory_after / 2**20:.0f} MiB after"
    )
    assert all(words(answer) == LONG for answer in answers)
    # One feed read the run for all of them: a reader each would have polled 100 times.
    polls = [u for u in await api.agent.updates(api.run(run_id)) if "stream_poll" in u]
    assert 0 < len(polls) < 100


async def test_a_last_event_id_of_anything_but_ascii_digits_is_422(api: Api) -> None:
    run_id = await api.start()

    # b"\xb2" is `²` to a server reading headers as Latin-1: a digit to `str.isdigit`.
    for last_event_id in (b"\xb2", "²".encode(), "٣".encode(), b"-1", b"1e3", b"9" * 40):
        response = await api.http.get(
            f"/v1/runs/{run_id}/events", headers={b"Last-Event-ID": last_event_id}
        )

        assert response.status_code == 422, last_event_id
        assert response.json()["error"]["code"] == "INPUT_INVALID"
