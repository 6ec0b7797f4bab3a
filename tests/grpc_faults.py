"""A gRPC proxy on loopback in front of the test's dev server that fails the first calls
of one method with the status a busy server answers now and then, and forwards every
other call to the server whole.

A dev server on a loaded machine has answered `DescribeTaskQueue` with `CANCELLED`
("operation was canceled"), an answer that says nothing of the task queue. Nothing in a
test can make the real server do that on cue; the proxy does it on the wire, where the
client cannot tell the difference."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from grpc import aio

__all__ = ["DESCRIBE_TASK_QUEUE", "FailingProxy", "failing_proxy"]

DESCRIBE_TASK_QUEUE = "/temporal.api.workflowservice.v1.WorkflowService/DescribeTaskQueue"


@dataclass
class FailingProxy:
    """Where the proxy listens, and how many calls it has failed so far."""

    address: str
    failed: int = 0


class _Forwarding(grpc.GenericRpcHandler):
    """Every method, unary to unary (all of Temporal's services are), as raw bytes."""

    def __init__(self, upstream: aio.Channel, proxy: FailingProxy, method: str, times: int) -> None:
        self._upstream, self._proxy, self._method, self._times = upstream, proxy, method, times

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        return grpc.unary_unary_rpc_method_handler(self._forward(handler_call_details.method))

    def _forward(
        self, method: str
    ) -> Callable[[bytes, aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]:
        call: aio.UnaryUnaryMultiCallable[bytes, bytes] = self._upstream.unary_unary(method)

        async def forward(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
            if method == self._method and self._proxy.failed < self._times:
                self._proxy.failed += 1
                await context.abort(grpc.StatusCode.CANCELLED, "operation was canceled")
            metadata = [
                (key, value)
                for key, value in context.invocation_metadata() or ()
                if not key.startswith(":")
            ]
            try:
                return await call(request, metadata=metadata)
            except aio.AioRpcError as e:
                await context.abort(e.code(), e.details() or "")

        return forward


@asynccontextmanager
async def failing_proxy(
    target: str, method: str = DESCRIBE_TASK_QUEUE, times: int = 2
) -> AsyncIterator[FailingProxy]:
    """A proxy to the server at `target` failing the first `times` calls of `method`."""
    async with aio.insecure_channel(target) as upstream:
        server = aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        proxy = FailingProxy(f"127.0.0.1:{port}")
        server.add_generic_rpc_handlers([_Forwarding(upstream, proxy, method, times)])
        await server.start()
        try:
            yield proxy
        finally:
            await server.stop(grace=None)
