"""The chaos soak: many runs at once while workers are killed and the server restarts.

    python -m tests.soak --runs 100 --workers 2       (or scripts/soak --runs 100)

Every run is the same multi-turn conversation: tool calls (two of them in parallel), a
reply by signal (`reply`), one by update (`send`), a `pause` while a model call is in
flight, and a `finish`. The model answers as a pure function of the conversation (see
`soak_answer`), so a call repeated after a fault gets the answer the lost one would have
had. Meanwhile a driver SIGKILLs a random worker process every few seconds and starts a
new one, and restarts the dev server once. Every run must reach `Completed` with its
exact expected transcript: every message once, in order.

Prints `N/N exact` (or `k/N exact` and, for each run that differs, why and a diff), the
faults injected and the time taken; exits 0 only when every run is exact. Everything it
starts (dev server, workers, model) is stopped on the way out, also on Ctrl-C, SIGTERM,
failure or the global `--timeout`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from temporalio.client import Client

from tarry.cli.processes import DevServer, WorkerProcess
from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import ChatMessage, ErrorCode, Phase, RunInput, RunState, Timeouts
from tarry.temporal.entrypoint import run_main
from tests.deadline import HEARTBEAT, deadline
from tests.faults import (
    FunctionModel,
    Reply,
    activity_attempts,
    answers_since_user,
    assistant,
    call_id,
    calling,
    check_replay,
    connect,
    eventually,
    fault_worker,
    last_user_text,
    tool_call,
    tool_ok,
    transcript_diff,
    user,
    wait_until,
    workflow_task_failures,
    written,
)

TASK_QUEUE = "soak"
SOAK_TIMEOUTS = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=30, tool=5)
"""A dead worker's model call is retried within ~2 s, its tool call within ~5 s."""
STEP_TIMEOUT = deadline(300)
"""Seconds one step of a run may take, faults included, before the run counts as stuck.
Generous: on a loaded 2-core machine a server restart plus a few kills can hold one
run's step for over two minutes (seen: 4 of 100 at 180 s, each ending correctly later)."""
TURNS_PER_RUN = 9
"""Assistant messages in a run's transcript: the model answers that count."""


@dataclass
class SoakConfig:
    runs: int = 100
    workers: int = 2
    kill_every: float = 3.0
    """Mean seconds between worker kills (uniformly 0.5x to 1.5x)."""
    server_restart_after: int = 2
    """The dev server is restarted once, right after this many worker kills."""
    server_signal: signal.Signals = signal.SIGKILL
    model_delay: float = 0.2
    """Mean seconds the model takes per answer, so kills find calls in flight."""
    timeout: float = deadline(600)
    """The global bound: past it, unfinished runs count as failed."""
    seed: int | None = None
    data_dir: Path | None = None
    """Where the server's SQLite file and the logs go; default: a temporary directory,
    removed after a clean soak and kept (and printed) after a failed one."""
    verbose: bool = False


# --- The conversation ----------------------------------------------------------------


def soak_answer(delay: float, rng: random.Random) -> Callable[[list[dict[str, Any]]], Reply]:
    """The model's answer: a pure function of the messages (the delay aside).

    The last user message names the stage and the run (`second soak-007`); the number
    of assistant messages since says how far into the stage the run is."""

    def answer(messages: list[dict[str, Any]]) -> Reply:
        stage, _, run = last_user_text(messages).partition(" ")
        k = answers_since_user(messages)
        tag = f"{run}:{stage}:{k}"
        pace = delay * rng.uniform(0.5, 1.5)
        match stage, k:
            case "start", 0:
                calls = [("write_file", {"path": "notes.txt", "content": f"note {run}"})]
                return Reply(calls=calls, tag=tag, delay=pace)
            case "start", 1:
                calls = [("read_file", {"path": "notes.txt"}), ("list_files", {"path": "."})]
                return Reply(calls=calls, tag=tag, delay=pace)
            case "start", 2:
                return Reply(f"noted {run}", tag=tag, delay=pace)
            case "second", 0:
                calls = [("write_file", {"path": "second.txt", "content": f"second {run}"})]
                return Reply(calls=calls, tag=tag, delay=pace)
            case "second", 1:
                return Reply(f"second done {run}", tag=tag, delay=pace)
            case "third", 0:
                return Reply(calls=[("read_file", {"path": "second.txt"})], tag=tag, delay=pace)
            case "third", 1:
                return Reply(f"third done {run}", tag=tag, delay=pace)
            case "fourth", 0:
                # Held until the driver has paused the run: the pause lands mid-call.
                calls = [("write_file", {"path": "fourth.txt", "content": f"fourth {run}"})]
                return Reply(calls=calls, tag=tag, hold=True, delay=pace)
            case "finish", 0:
                return Reply(calls=[("finish", {"result": f"done {run}"})], tag=tag, delay=pace)
        return Reply(f"unexpected: {tag}", tag=tag)

    return answer


def expected_transcript(run: str) -> list[ChatMessage]:
    """The transcript every run must end with, whatever faults it met."""
    t: list[ChatMessage] = [user(f"start {run}")]
    note = tool_call(call_id(t), "write_file", {"path": "notes.txt", "content": f"note {run}"})
    t += [calling(note), tool_ok(note, written("notes.txt", f"note {run}"))]
    read = tool_call(call_id(t, 0), "read_file", {"path": "notes.txt"})
    listing = tool_call(call_id(t, 1), "list_files", {"path": "."})
    t += [calling(read, listing), tool_ok(read, f"note {run}"), tool_ok(listing, ["notes.txt"])]
    t += [assistant(f"noted {run}"), user(f"second {run}")]
    second = tool_call(call_id(t), "write_file", {"path": "second.txt", "content": f"second {run}"})
    t += [calling(second), tool_ok(second, written("second.txt", f"second {run}"))]
    t += [assistant(f"second done {run}"), user(f"third {run}")]
    reread = tool_call(call_id(t), "read_file", {"path": "second.txt"})
    t += [calling(reread), tool_ok(reread, f"second {run}"), assistant(f"third done {run}")]
    t += [user(f"fourth {run}")]
    fourth = tool_call(call_id(t), "write_file", {"path": "fourth.txt", "content": f"fourth {run}"})
    # Paused after the tool round: the run waits for the user with no answer of its own.
    t += [calling(fourth), tool_ok(fourth, written("fourth.txt", f"fourth {run}"))]
    t += [user(f"finish {run}")]
    finish = tool_call(call_id(t), "finish", {"result": f"done {run}"})
    t += [calling(finish), tool_ok(finish, f"done {run}")]
    return t


# --- One run's driver ----------------------------------------------------------------


@dataclass
class RunDriver:
    """Drives one run through the conversation, retrying each request across faults with
    the same message id, so a retry is never a second message."""

    run_id: str
    tarry: Tarry
    model: FunctionModel
    stage: str = "not started"
    problems: list[str] = field(default_factory=list)
    diff: str = ""
    done: bool = False

    @property
    def exact(self) -> bool:
        return self.done and not self.problems and not self.diff

    async def drive(self) -> None:
        try:
            await self._drive()
        except Exception as e:
            self.problems.append(f"stopped at {self.stage!r}: {type(e).__name__}: {e}")

    def _check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)

    async def _drive(self) -> None:
        rid, model = self.run_id, self.model
        self.stage = "start"
        run = await eventually(self._start, timeout=deadline(120), what="start")
        self.stage = "reply (signal) after the first answers"
        await model.reached(f"{rid}:start:2", timeout=STEP_TIMEOUT)
        # Sent while the last answer of the stage is being asked for: it is delivered at
        # the next turn boundary, after that answer, as if sent once the run waited.
        await eventually(lambda: run.reply(f"second {rid}", id=f"{rid}-2"), timeout=deadline(120))
        self.stage = "send (update)"
        await model.reached(f"{rid}:second:1", timeout=STEP_TIMEOUT)
        state = await self._send(run, f"third {rid}", f"{rid}-3")
        self._check(
            (state.phase, state.last_assistant_text) == (Phase.WAITING_USER, f"third done {rid}"),
            f"send answered {state.phase} {state.last_assistant_text!r}",
        )
        self.stage = "reply, then pause during the model call"
        await eventually(lambda: run.reply(f"fourth {rid}", id=f"{rid}-4"), timeout=deadline(120))
        await model.reached(f"{rid}:fourth:0", timeout=STEP_TIMEOUT)
        await eventually(run.pause, timeout=deadline(120))
        model.release(f"{rid}:fourth:0")
        self.stage = "waiting for the pause to take effect"

        async def paused() -> bool:
            return (await run.state()).phase is Phase.WAITING_USER

        await wait_until(paused, timeout=STEP_TIMEOUT, interval=0.5, what="the pause")
        self.stage = "send finish"
        state = await self._send(run, f"finish {rid}", f"{rid}-5")
        if state.phase is Phase.COMPLETED:
            self.stage = "result and transcript"
            result = await eventually(run.result, timeout=STEP_TIMEOUT)
            self._check(
                (result.phase, result.output) == (Phase.COMPLETED, f"done {rid}"),
                f"result {result.phase} {result.output!r} {result.error}",
            )
        else:  # it will not complete by itself: no point waiting for its result
            self.problems.append(f"send finish answered {state.phase}, not Completed")
            self.stage = "transcript"
        transcript = await eventually(run.transcript, timeout=STEP_TIMEOUT)
        self.diff = transcript_diff(expected_transcript(rid), transcript)
        self.stage = "done"
        self.done = True

    async def _send(self, run: RunHandle, text: str, id: str) -> RunState:
        """`send`, retried with the same message id: delivered once however often it is tried."""
        return await eventually(
            lambda: run.send(text, id=id),
            timeout=STEP_TIMEOUT,
            attempt_timeout=deadline(60),
            what=id,
        )

    async def _start(self) -> RunHandle:
        try:
            prompt = f"start {self.run_id}"
            return await self.tarry.start(
                RunInput(prompt=prompt, timeouts=SOAK_TIMEOUTS), run_id=self.run_id
            )
        except TarryError as e:
            if e.code is not ErrorCode.RUN_EXISTS:
                raise
            return self.tarry.get(self.run_id)  # an earlier attempt got through


# --- Faults --------------------------------------------------------------------------


@dataclass
class Chaos:
    """Kills a random worker every few seconds and starts a new one in its place;
    restarts the dev server once. Checks that no worker died of anything else."""

    config: SoakConfig
    server: DevServer
    workers: list[WorkerProcess]
    rng: random.Random
    say: Callable[[str], None]
    began: float = field(default_factory=time.monotonic)
    kills: int = 0
    server_restarts: int = 0
    unexpected_exits: int = 0
    error: str | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def _note(self, text: str) -> None:
        if self.config.verbose:
            self.say(f"[{time.monotonic() - self.began:6.1f} s] {text}")

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                pause = self.config.kill_every * self.rng.uniform(0.5, 1.5)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await self.stop.wait()
                if self.stop.is_set():
                    break
                await self._replace_dead_workers()
                victim = self.rng.randrange(len(self.workers))
                await self.workers[victim].kill()
                self.kills += 1
                self._note(f"SIGKILL worker {victim + 1} (kill {self.kills})")
                await self.workers[victim].start()
                self._note(f"worker {victim + 1} started again")
                if self.kills == self.config.server_restart_after and not self.server_restarts:
                    self._note(f"{self.config.server_signal.name} the dev server")
                    await self.server.restart(self.config.server_signal)
                    self.server_restarts += 1
                    self._note("the dev server serves again")
            await self._replace_dead_workers()
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"

    async def _replace_dead_workers(self) -> None:
        """A worker must outlive server restarts by itself: one that exited is a failure."""
        for i, worker in enumerate(self.workers):
            if not worker.alive:
                self.unexpected_exits += 1
                self._note(f"worker {i + 1} exited by itself; starting it again")
                await worker.start()


# --- The soak --------------------------------------------------------------------------


@dataclass
class SoakReport:
    runs: list[RunDriver]
    chaos: Chaos
    seconds: float
    timed_out: bool
    model_requests: int
    retried_activities: dict[str, int]
    replay_failures: dict[str, str]
    data_dir: Path

    @property
    def exact(self) -> int:
        return sum(run.exact for run in self.runs)

    @property
    def ok(self) -> bool:
        return (
            self.exact == len(self.runs)
            and not self.chaos.unexpected_exits
            and self.chaos.error is None
            and not self.replay_failures
        )

    def lines(self) -> list[str]:
        n, chaos = len(self.runs), self.chaos
        signal_name = chaos.config.server_signal.name
        out = [f"{self.exact}/{n} exact"]
        for run in self.runs:
            if not run.exact:
                why = run.problems or [
                    "transcript differs" if run.done else f"unfinished at {run.stage!r}"
                ]
                out.append(f"  {run.run_id}: " + "; ".join(why))
                out += [f"    {line}" for line in run.diff.splitlines()]
        out.append(
            f"faults: {chaos.kills} worker kills (SIGKILL), "
            f"{chaos.server_restarts} server restart{'s' * (chaos.server_restarts != 1)} "
            f"({signal_name}), {chaos.unexpected_exits} unexpected worker exits"
        )
        retried = ", ".join(f"{n} {kind}" for kind, n in self.retried_activities.items())
        answers = TURNS_PER_RUN * n
        again = (
            f" for {answers} answers ({self.model_requests - answers} asked again after faults)"
            if all(run.done for run in self.runs)
            else ""
        )
        out.append(
            f"model: {self.model_requests} requests{again}; activities retried: {retried or 'none'}"
        )
        replayed = n - len(self.replay_failures)
        out.append(f"replay: {replayed}/{n} histories replay")
        out += [f"  {rid}: {why}" for rid, why in self.replay_failures.items()]
        if chaos.error:
            out.append(f"chaos driver failed: {chaos.error}")
        if self.timed_out:
            out.append(f"timed out after {chaos.config.timeout:g} s")
        out.append(f"time: {self.seconds:.1f} s")
        if not self.ok:
            out.append(f"logs: {self.data_dir}")
        return out


async def _replay_failures(client: Client, runs: list[RunDriver]) -> dict[str, str]:
    """Every run's history, faults and all, must replay: run id -> why it does not."""
    failures = {}
    for run in runs:
        try:
            await check_replay(client, [run.run_id])
        except Exception as e:
            failures[run.run_id] = f"{type(e).__name__}: {str(e)[:300]}"
    return failures


async def _diagnose(client: Client, runs: list[RunDriver]) -> None:
    """For each run that is not exact, whether a failing workflow task holds it."""
    for run in runs:
        if not run.exact:
            with contextlib.suppress(Exception):
                failures = await workflow_task_failures(client, run.run_id)
                if failures:
                    run.problems.append(
                        f"{len(failures)} failed workflow task(s), last: {failures[-1][:300]}"
                    )


async def _retried_activities(client: Client, runs: list[RunDriver]) -> dict[str, int]:
    """How many model calls and tool calls needed more than one attempt, from history."""
    counts = {"model calls": 0, "tool calls": 0}
    for run in runs:
        with contextlib.suppress(Exception):
            for attempt in await activity_attempts(client, run.run_id):
                if attempt.attempts > 1:
                    kind = "model calls" if attempt.activity == "call_llm" else "tool calls"
                    counts[kind] += 1
    return counts


async def run_soak(config: SoakConfig, say: Callable[[str], None] = print) -> SoakReport:
    """Runs the soak; stops everything it started before it returns or raises."""
    began = time.monotonic()
    seed = config.seed if config.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    data_dir = config.data_dir or Path(tempfile.mkdtemp(prefix="tarry-soak-"))
    say(f"soak: {config.runs} runs, {config.workers} workers, seed {seed}, data in {data_dir}")
    server = DevServer(data_dir / "server")
    model = FunctionModel(soak_answer(config.model_delay, rng))
    workers: list[WorkerProcess] = []
    report: SoakReport | None = None
    try:
        await server.start()
        await model.start()
        workers += [
            fault_worker(
                address=server.address,
                task_queue=TASK_QUEUE,
                model_url=model.base_url,
                workspace_root=data_dir / "workspaces",
                log=data_dir / f"worker-{i + 1}.log",
            )
            for i in range(config.workers)
        ]
        await asyncio.gather(*(worker.start() for worker in workers))
        client = await connect(server.address)
        tarry = Tarry(client, TASK_QUEUE)
        drivers = [RunDriver(f"soak-{i + 1:03d}", tarry, model) for i in range(config.runs)]
        chaos = Chaos(config, server, workers, rng, say)
        chaos_task = asyncio.create_task(chaos.run())
        timed_out = False
        try:
            async with asyncio.timeout(config.timeout):
                await asyncio.gather(*(driver.drive() for driver in drivers))
        except TimeoutError:
            timed_out = True
        finally:
            chaos.stop.set()
            async with asyncio.timeout(deadline(120)):
                await chaos_task
        seconds = time.monotonic() - began
        async with asyncio.timeout(deadline(300)):  # reading back 100 histories takes seconds
            replay_failures = await _replay_failures(client, drivers)
            await _diagnose(client, drivers)
            retried = await _retried_activities(client, drivers)
        report = SoakReport(
            runs=drivers,
            chaos=chaos,
            seconds=seconds,
            timed_out=timed_out,
            model_requests=model.requests,
            retried_activities=retried,
            replay_failures=replay_failures,
            data_dir=data_dir,
        )
        for line in report.lines():
            say(line)
        return report
    finally:
        for worker in workers:
            await worker.kill()
        await model.close()
        await server.stop()
        if report is not None and report.ok and config.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


def _parse(argv: list[str] | None) -> SoakConfig:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=3.0, metavar="SECONDS")
    parser.add_argument("--server-restart-after", type=int, default=2, metavar="KILLS")
    parser.add_argument("--server-signal", choices=["kill", "term"], default="kill")
    parser.add_argument("--model-delay", type=float, default=0.2, metavar="SECONDS")
    parser.add_argument("--timeout", type=float, default=SoakConfig.timeout, metavar="SECONDS")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--data-dir", type=Path, help="keep the server's data and logs here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each fault")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 1:
        parser.error("--runs and --workers must be at least 1")
    return SoakConfig(
        runs=args.runs,
        workers=args.workers,
        kill_every=args.kill_every,
        server_restart_after=args.server_restart_after,
        server_signal=signal.SIGKILL if args.server_signal == "kill" else signal.SIGTERM,
        model_delay=args.model_delay,
        timeout=args.timeout,
        seed=args.seed,
        data_dir=args.data_dir,
        verbose=args.verbose,
    )


def main(argv: list[str] | None = None) -> NoReturn:
    config = _parse(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    async def soak() -> int:
        # SIGINT and SIGTERM cancel the soak: everything it started is stopped on the way
        # out. Handled here, not left to Python: a shell starts background jobs with
        # SIGINT ignored, and asyncio.run handles only SIGINT.
        task = asyncio.current_task()
        assert task is not None
        received: list[signal.Signals] = []

        def interrupt(sig: signal.Signals) -> None:
            received.append(sig)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, interrupt, sig)
        try:
            report = await run_soak(config, say)
        except asyncio.CancelledError:
            name = received[0].name if received else "cancelled"
            say(f"soak interrupted ({name}); everything it started is stopped")
            return 128 + (received[0] if received else signal.SIGTERM)
        return 0 if report.ok else 1

    run_main(soak)


if __name__ == "__main__":
    main(sys.argv[1:])
