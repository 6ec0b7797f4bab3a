"""How the HTTP API says no: `{"error": {"code", "message"}}` with the status a code
means, for Tarry's own errors, schema errors, unknown routes and oversized bodies alike."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from tarry.api.auth import refusal_before_the_body
from tarry.contracts import MAX_INPUT_BYTES, ErrorCode
from tarry.core.errors import RetryLater, TarryError

__all__ = [
    "AUTH",
    "INTERNAL",
    "INTERNAL_MESSAGE",
    "MAX_BODY_BYTES",
    "READ",
    "STARTS",
    "WRITE",
    "ApiError",
    "BodyLimit",
    "ErrorBody",
    "error_answers",
    "error_response",
    "install_error_handlers",
    "status_of",
]

INTERNAL = HTTPStatus.INTERNAL_SERVER_ERROR.name
"""The code a stream's last event gives for a failure of the API itself."""
INTERNAL_MESSAGE = "the stream failed inside the API; its log says why"

# The error answers of a route, by what it does. Every route asks Temporal, which may not
# answer in time: 503 `TEMPORAL_UNAVAILABLE`.
AUTH = (HTTPStatus.UNAUTHORIZED, HTTPStatus.SERVICE_UNAVAILABLE)
READ = (*AUTH, HTTPStatus.NOT_FOUND, HTTPStatus.UNPROCESSABLE_ENTITY)
WRITE = (
    *READ,
    HTTPStatus.FORBIDDEN,
    HTTPStatus.CONFLICT,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
)
STARTS = (*WRITE, HTTPStatus.TOO_MANY_REQUESTS)

MAX_BODY_BYTES = MAX_INPUT_BYTES + 64 * 1024
"""The largest request body read: the largest reply, plus room for its JSON escapes'
common cases and the other fields. A reply that escapes to more is refused whole."""

_STATUS = {
    ErrorCode.RUN_NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.RUN_ENDED: HTTPStatus.CONFLICT,
    ErrorCode.RUN_EXISTS: HTTPStatus.CONFLICT,
    ErrorCode.RUN_ID_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.RUN_NOT_ENDED: HTTPStatus.CONFLICT,
    ErrorCode.SCHEDULE_NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.EVAL_NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.EVAL_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.SCHEDULE_EXISTS: HTTPStatus.CONFLICT,
    ErrorCode.SCHEDULE_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.DATASET_NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.DATASET_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.DATASET_TOO_LARGE: HTTPStatus.UNPROCESSABLE_ENTITY,
    # How many versions a dataset has is the store's state, not the request's: a conflict.
    ErrorCode.DATASET_TOO_MANY_VERSIONS: HTTPStatus.CONFLICT,
    ErrorCode.RUN_BUSY: HTTPStatus.CONFLICT,
    ErrorCode.RETRY_NOT_WAITING: HTTPStatus.CONFLICT,
    ErrorCode.APPROVAL_NOTHING_PENDING: HTTPStatus.CONFLICT,
    # Which message is a user's is the run's state, as which call is pending is.
    ErrorCode.FORK_POINT_INVALID: HTTPStatus.CONFLICT,
    ErrorCode.PIN_UNKNOWN_MESSAGE: HTTPStatus.CONFLICT,
    ErrorCode.PIN_INVALID: HTTPStatus.CONFLICT,
    ErrorCode.PINS_OVER_BUDGET: HTTPStatus.CONFLICT,
    ErrorCode.APPROVAL_UNKNOWN_CALL: HTTPStatus.CONFLICT,
    ErrorCode.APPROVAL_ALREADY_DECIDED: HTTPStatus.CONFLICT,
    ErrorCode.APPROVAL_INVALID_ARGUMENTS: HTTPStatus.CONFLICT,
    ErrorCode.APPROVAL_NOT_ALLOWED: HTTPStatus.FORBIDDEN,
    # The caller's `[limits]` keep them from it, whatever the run's state.
    ErrorCode.MODEL_NOT_ALLOWED: HTTPStatus.FORBIDDEN,
    ErrorCode.BUDGET_NOT_ALLOWED: HTTPStatus.FORBIDDEN,
    ErrorCode.NOT_ALLOWED: HTTPStatus.FORBIDDEN,
    ErrorCode.INPUT_TOO_LARGE: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    ErrorCode.INPUT_EMPTY: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.INPUT_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    # Which tools there are is the workers' state, which no schema can state: a conflict.
    ErrorCode.TOOL_NOT_FOUND: HTTPStatus.CONFLICT,
    ErrorCode.LLM_UNKNOWN_PROFILE: HTTPStatus.CONFLICT,
    ErrorCode.BUDGET_INVALID: HTTPStatus.UNPROCESSABLE_ENTITY,
    # The run refused an update in a way Tarry has no code for: its state, not the request.
    ErrorCode.UPDATE_FAILED: HTTPStatus.CONFLICT,
    ErrorCode.UNAUTHORIZED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_EXPIRED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_NOT_YET_VALID: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_WRONG_AUDIENCE: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_WRONG_ISSUER: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_UNKNOWN_KEY: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_ALGORITHM_REFUSED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_INVALID: HTTPStatus.UNAUTHORIZED,
    ErrorCode.USER_NAME_REFUSED: HTTPStatus.FORBIDDEN,
    ErrorCode.USER_HEADER_REPEATED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.ACTION_LINK_INVALID: HTTPStatus.FORBIDDEN,
    ErrorCode.A2A_PUSH_REFUSED: HTTPStatus.FORBIDDEN,
    ErrorCode.CONNECT_REFUSED: HTTPStatus.FORBIDDEN,
    ErrorCode.CONNECTION_NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.CONNECTIONS_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.ACTION_LINK_EXPIRED: HTTPStatus.GONE,
    ErrorCode.RUN_NOT_SERVED: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.SEARCH_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.MEMORY_NOT_FOUND: HTTPStatus.NOT_FOUND,
    # The workers fail the run's task: an upstream failing, which a retry does not mend.
    ErrorCode.RUN_TASK_FAILING: HTTPStatus.BAD_GATEWAY,
    ErrorCode.TEMPORAL_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.QUOTA_EXCEEDED: HTTPStatus.TOO_MANY_REQUESTS,
    # Too many of the caller's runs open (`[limits] max_concurrent_runs`): the same
    # start succeeds once one ends, as a rate limit's does; no `Retry-After`, since
    # when a run ends is a person's matter.
    ErrorCode.TOO_MANY_RUNS: HTTPStatus.TOO_MANY_REQUESTS,
}


def status_of(code: ErrorCode) -> int:
    """The HTTP status of a Tarry error code; a code no request should meet is a 500."""
    return _STATUS.get(code, HTTPStatus.INTERNAL_SERVER_ERROR)


class ApiError(BaseModel):
    code: str
    """An `ErrorCode`; for failures outside Tarry's codes (an unknown route, a wrong
    method), the HTTP status's name, e.g. `NOT_FOUND`."""
    message: str


class ErrorBody(BaseModel):
    error: ApiError


def error_answers(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The error answers a route can give, for the OpenAPI document."""
    return {status: {"model": ErrorBody} for status in statuses}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ApiError(code=code, message=message))
    headers = dict(headers or {})
    if status == HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _tarry_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, TarryError)
    later = {"Retry-After": str(error.retry_after)} if isinstance(error, RetryLater) else None
    return error_response(status_of(error.code), error.code, error.message, later)


async def _schema_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    if (refused := await refusal_before_the_body(request)) is not None:
        return _tarry_error(request, refused)
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    # A validator that knows the Tarry error it means names it as its type (`RunId`).
    code = ErrorCode(first["type"]) if first["type"] in set(ErrorCode) else ErrorCode.INPUT_INVALID
    return error_response(status_of(code), code, f"{where}: {message}")


def _allowed(request: Request) -> str:
    """The methods the OpenAPI document names at the request's path (Starlette's 405
    names those of the first route it finds, and `/v1/runs` is two); the inbox's files
    at any other path take GET and HEAD."""
    path = request.url.path
    methods = {
        method.upper()
        for template, operations in request.app.openapi()["paths"].items()
        if compile_path(template)[0].match(path)
        for method in operations
    }
    return ", ".join(sorted(methods or {"GET", "HEAD"}))


def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    status = error.status_code
    code = ErrorCode.INPUT_TOO_LARGE if status == 413 else HTTPStatus(status).name
    if status == HTTPStatus.BAD_REQUEST:  # FastAPI's word for a body it could not decode
        status, code = HTTPStatus.UNPROCESSABLE_ENTITY, ErrorCode.INPUT_INVALID
    headers = dict(error.headers or {})
    if status == HTTPStatus.METHOD_NOT_ALLOWED:
        headers["Allow"] = _allowed(request)
    return error_response(status, code, error.detail, headers)


def _temporal_error(_: Request, error: Exception) -> JSONResponse:
    """A call to Temporal that timed out or was refused (a busy or restarting server),
    or the SDK's failed (re)connect, a RuntimeError: not the caller's fault, and a retry
    may well succeed. Any other RuntimeError is a fault of the API's own."""
    if isinstance(error, RPCError):
        why = f"{error.status.name}: {error.message}"
    elif str(error).startswith(_CONNECT_FAILED):
        why = "cannot connect"
    else:
        raise error
    return error_response(
        HTTPStatus.SERVICE_UNAVAILABLE,
        ErrorCode.TEMPORAL_UNAVAILABLE,
        f"Temporal did not answer ({why}); try again",
        {"Retry-After": "1"},
    )


_CONNECT_FAILED = "Failed client connect"
"""How the SDK words the RuntimeError of a client that cannot (re)connect."""


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RPCError, _temporal_error)
    app.add_exception_handler(RuntimeError, _temporal_error)
    app.add_exception_handler(TarryError, _tarry_error)
    app.add_exception_handler(RequestValidationError, _schema_error)
    app.add_exception_handler(HTTPException, _http_error)


class _BodyTooLarge(HTTPException):
    """An HTTPException, so that FastAPI, which turns any other error met while reading a
    body into a 400, lets it through to `_http_error`."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"the request body is over {limit} bytes; a reply may have {MAX_INPUT_BYTES} bytes",
        )


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 `INPUT_TOO_LARGE` before it is
    read whole: at once when its Content-Length says so, else as soon as the chunks
    read pass it (a chunked body has no length to check first).

    Starlette's own `RequestBodyLimitMiddleware` answers in plain text; this one answers
    like every other error of the API."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await _http_error(Request(scope), _BodyTooLarge(self.limit))(scope, receive, send)
            return
        read = 0
        started = False

        async def counted() -> Message:
            nonlocal read
            message = await receive()
            read += len(message.get("body", b""))
            if read > self.limit:
                raise _BodyTooLarge(self.limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _BodyTooLarge as e:  # read outside a route, where no handler caught it
            if started:
                raise
            await _http_error(Request(scope), e)(scope, receive, send)
