"""gRPC proxies on loopback in front of the test's dev server, which forward every call
to the server whole but for one method's first calls: failed with the status a busy
server answers now and then, or with its refusal of an update it did not admit
(`failing_proxy`), or held until the test lets them go on (`holding_proxy`); or that
count one method's calls, to tell what a client asked the server for (`counting_proxy`).

A dev server on a loaded machine has answered `DescribeTaskQueue` and
`TerminateWorkflowExecution` with `CANCELLED` ("operation was canceled"), an answer that
says nothing of the task queue or the run; and a call
can reach the server a moment after another person's, whatever order their requests
came in. Nothing in a test can make the real server do either on cue; the proxy does it
on the wire, where the client cannot tell the difference."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
from google.protobuf.any_pb2 import Any
from grpc import aio
from temporalio.api.common.v1 import GrpcStatus
from temporalio.api.errordetails.v1 import MultiOperationExecutionFailure, WorkflowNotReadyFailure
from temporalio.api.failure.v1 import MultiOperationExecutionAborted

__all__ = [
    "DESCRIBE_TASK_QUEUE",
    "EXECUTE_MULTI_OPERATION",
    "GET_WORKFLOW_EXECUTION_HISTORY",
    "START_WORKFLOW_EXECUTION",
    "TERMINATE_WORKFLOW_EXECUTION",
    "UNADMITTED_WITH_START",
    "CountingProxy",
    "FailingProxy",
    "HoldingProxy",
    "Refusal",
    "counting_proxy",
    "failing_proxy",
    "holding_proxy",
]

_SERVICE = "/temporal.api.workflowservice.v1.WorkflowService"
DESCRIBE_TASK_QUEUE = f"{_SERVICE}/DescribeTaskQueue"
START_WORKFLOW_EXECUTION = f"{_SERVICE}/StartWorkflowExecution"
DESCRIBE_WORKFLOW_EXECUTION = f"{_SERVICE}/DescribeWorkflowExecution"
EXECUTE_MULTI_OPERATION = f"{_SERVICE}/ExecuteMultiOperation"
"""An update with start, in one call."""
GET_WORKFLOW_EXECUTION_HISTORY = f"{_SERVICE}/GetWorkflowExecutionHistory"
TERMINATE_WORKFLOW_EXECUTION = f"{_SERVICE}/TerminateWorkflowExecution"
_DETAILS = "grpc-status-details-bin"
"""The trailer that carries an error's details."""


@dataclass(frozen=True)
class Refusal:
    """A gRPC error a proxy answers in the server's place: its status, message, and
    `details` (a serialized `google.rpc.Status`, which the client reads its details from)."""

    code: grpc.StatusCode
    message: str
    details: bytes | None = None


BUSY = Refusal(grpc.StatusCode.CANCELLED, "operation was canceled")
"""A busy server's answer that says nothing."""


def _unadmitted_with_start() -> Refusal:
    """The server's refusal of an update with start whose update it did not admit (its
    run's workflow task failing): the update's `WorkflowNotReadyFailure` inside the call's
    `MultiOperationExecutionFailure`, the start aborted with it."""
    aborted, not_ready = Any(), Any()
    aborted.Pack(MultiOperationExecutionAborted())
    not_ready.Pack(WorkflowNotReadyFailure())
    failure = MultiOperationExecutionFailure(
        statuses=[
            MultiOperationExecutionFailure.OperationStatus(
                code=grpc.StatusCode.ABORTED.value[0], message="aborted", details=[aborted]
            ),
            MultiOperationExecutionFailure.OperationStatus(
                code=grpc.StatusCode.FAILED_PRECONDITION.value[0],
                message="Workflow Update is rejected because workflow task is failing",
                details=[not_ready],
            ),
        ]
    )
    packed = Any()
    packed.Pack(failure)
    message = "Update-with-Start could not be executed."
    code = grpc.StatusCode.FAILED_PRECONDITION  # the server's: its first failed operation's
    status = GrpcStatus(code=code.value[0], message=message, details=[packed])
    return Refusal(code, message, status.SerializeToString())


UNADMITTED_WITH_START = _unadmitted_with_start()

Gate = Callable[[aio.ServicerContext[bytes, bytes]], Awaitable[None]]
"""What a proxy does with a call of its method before forwarding it (abort it, wait)."""


@dataclass
class FailingProxy:
    """Where the proxy listens, and how many calls it has failed so far."""

    address: str
    failed: int = 0


@dataclass
class CountingProxy:
    """Where the proxy listens, and how many calls of its method it has forwarded."""

    address: str
    calls: int = 0


@dataclass
class HoldingProxy:
    """Where the proxy listens; `held` is set when it holds a call, which goes on to the
    server once the test sets `released`."""

    address: str
    held: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)


class _Forwarding(grpc.GenericRpcHandler):
    """Every method, unary to unary (all of Temporal's services are), as raw bytes;
    calls of `method` through `gate` first."""

    def __init__(self, upstream: aio.Channel, method: str, gate: Gate) -> None:
        self._upstream, self._method, self._gate = upstream, method, gate

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        return grpc.unary_unary_rpc_method_handler(self._forward(handler_call_details.method))

    def _forward(
        self, method: str
    ) -> Callable[[bytes, aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]:
        call: aio.UnaryUnaryMultiCallable[bytes, bytes] = self._upstream.unary_unary(method)

        async def forward(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
            if method == self._method:
                await self._gate(context)
            metadata = [
                (key, value)
                for key, value in context.invocation_metadata() or ()
                if not key.startswith(":")
            ]
            try:
                return await call(request, metadata=metadata)
            except aio.AioRpcError as e:
                # The trailers carry the error's details (which workflow, which
                # operation failed): the client reads them to raise the right error.
                await context.abort(e.code(), e.details() or "", tuple(e.trailing_metadata() or ()))

        return forward


@asynccontextmanager
async def _proxy(target: str, method: str, gate: Gate) -> AsyncIterator[str]:
    """A proxy to the server at `target`, calls of `method` through `gate`; its address."""
    async with aio.insecure_channel(target) as upstream:
        server = aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        server.add_generic_rpc_handlers([_Forwarding(upstream, method, gate)])
        await server.start()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            await server.stop(grace=None)


@asynccontextmanager
async def failing_proxy(
    target: str, method: str = DESCRIBE_TASK_QUEUE, times: int = 2, refusal: Refusal = BUSY
) -> AsyncIterator[FailingProxy]:
    """A proxy to the server at `target` answering the first `times` calls of `method`
    with `refusal`, which never reach the server."""
    proxy = FailingProxy("")

    async def fail(context: aio.ServicerContext[bytes, bytes]) -> None:
        if proxy.failed < times:
            proxy.failed += 1
            trailers = () if refusal.details is None else ((_DETAILS, refusal.details),)
            await context.abort(refusal.code, refusal.message, trailers)

    async with _proxy(target, method, fail) as proxy.address:
        yield proxy


@asynccontextmanager
async def holding_proxy(target: str, method: str) -> AsyncIterator[HoldingProxy]:
    """A proxy to the server at `target` holding the first call of `method` until the
    test sets `released`; later calls go on at once."""
    proxy = HoldingProxy("")

    async def hold(context: aio.ServicerContext[bytes, bytes]) -> None:
        if not proxy.held.is_set():
            proxy.held.set()
            await proxy.released.wait()

    async with _proxy(target, method, hold) as proxy.address:
        yield proxy


@asynccontextmanager
async def counting_proxy(target: str, method: str) -> AsyncIterator[CountingProxy]:
    """A proxy to the server at `target` counting the calls of `method`."""
    proxy = CountingProxy("")

    async def count(_: aio.ServicerContext[bytes, bytes]) -> None:
        proxy.calls += 1

    async with _proxy(target, method, count) as proxy.address:
        yield proxy
