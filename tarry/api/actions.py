"""`/v1/actions/{token}`: the approve and reject links of notifications
(`tarry.core.action_links`), which decide one gated call as the person the notification
was for, without a token.

A GET only shows a page that asks to confirm: chat apps fetch every URL a message shows
to preview it, and a GET that decided would approve on their behalf. The page's button
POSTs to the same URL, which checks the link and sends the decision with the run's
`decide` update as the link's user (source `link`); the run refuses a second decision
on the call, so a link works once. Both answer a page, the error code on it when the
link or the decision is refused. `tarry.api.access` guards the route as every other: a
page of another origin cannot post to it, while the page's own button can, since its
`Referrer-Policy: same-origin` lets the browser send the page's real `Origin` (under
`no-referrer` Chromium sends `null`, which the guard refuses).
"""

from __future__ import annotations

import html
import time
from dataclasses import replace
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse

from tarry.api.errors import status_of
from tarry.api.parts import PolicyOf, SettingsOf, TarryOf
from tarry.api.rights import Need
from tarry.client import Tarry, TarryError
from tarry.client.rights import check_decision, check_run
from tarry.config.settings import TarrySettings
from tarry.contracts import Door, ErrorCode, RunState
from tarry.contracts.guardrails import held_line
from tarry.contracts.waits import wait_kind
from tarry.core.action_links import Action, verify
from tarry.core.ownership import Policy

__all__ = ["actions_router"]

# No length limits: whatever the path holds, a token this API did not sign is 403.
Token = Annotated[str, Path(description="The link's token.")]

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>Tarry: {title}</title><link rel="stylesheet" href="/inbox.css"></head>
<body><main class="action"><h1>{title}</h1>{body}</main></body></html>
"""

_PAGE_RESPONSE: dict[str, Any] = {
    "content": {"text/html": {}},
    "description": "a page naming the error code",
}
_REFUSED: dict[int | str, dict[str, Any]] = {
    HTTPStatus.FORBIDDEN: _PAGE_RESPONSE,
    HTTPStatus.NOT_FOUND: _PAGE_RESPONSE,
    HTTPStatus.CONFLICT: _PAGE_RESPONSE,
    HTTPStatus.GONE: _PAGE_RESPONSE,
    HTTPStatus.SERVICE_UNAVAILABLE: _PAGE_RESPONSE,
}


def actions_router() -> APIRouter:
    router = APIRouter(prefix="/v1/actions", tags=["actions"])

    @router.get("/{token}", response_class=HTMLResponse, responses=_REFUSED)
    async def confirm(
        token: Token, tarry: TarryOf, settings: SettingsOf, policy: PolicyOf
    ) -> HTMLResponse:
        """A page showing the call and asking to confirm the link's decision; it decides
        nothing (a chat app's preview fetches the link too). 403 `ACTION_LINK_INVALID`,
        410 `ACTION_LINK_EXPIRED`, 409 `APPROVAL_ALREADY_DECIDED` for a call that waits
        for no decision."""
        try:
            action = verify(token, settings.action_key(), time.time())
            await _may_decide(tarry, settings, policy, action)
            state = await tarry.get(action.run_id).state()
        except TarryError as e:
            return _refusal(e)
        pending = next((p for p in state.pending_approvals if p.call_id == action.call_id), None)
        if pending is None:
            return _refusal(
                TarryError(
                    ErrorCode.APPROVAL_ALREADY_DECIDED,
                    f"call {action.call_id!r} of run {action.run_id!r} waits for no decision",
                )
            )
        verb = "Approve" if action.approve else "Reject"
        what = f"<code>{_e(pending.tool)}</code> call"
        if pending.guardrail is not None:  # a text a guardrail holds: allowed or blocked
            verb = "Allow" if action.approve else "Block"
            what = f"the text {_e(held_line(pending.tool, pending.guardrail))},"
        body = (
            f"<p>{verb} {what} <code>{_e(action.call_id)}</code>"
            f' of run <a href="/#/runs/{_e(action.run_id)}"><code>{_e(action.run_id)}</code></a>'
            f" as <strong>{_e(action.user)}</strong>?</p><pre>{_e(pending.arguments)}</pre>"
            f'<form method="post"><button type="submit">{verb}</button></form>'
        )
        return _page(f"{verb} a {'text' if pending.guardrail else 'tool call'}", body)

    @router.post("/{token}", response_class=HTMLResponse, responses=_REFUSED)
    async def act(
        token: Token, tarry: TarryOf, settings: SettingsOf, policy: PolicyOf
    ) -> HTMLResponse:
        """Decides the link's call as its user, once: the run's state at its next stop
        point, in a page. 409 `APPROVAL_ALREADY_DECIDED` for a call decided already (by
        this link or any other way), 403 `ACTION_LINK_INVALID` or `APPROVAL_NOT_ALLOWED`,
        410 `ACTION_LINK_EXPIRED`: nothing is decided."""
        try:
            action = verify(token, settings.action_key(), time.time())
            await _may_decide(tarry, settings, policy, action)
            before = await tarry.get(action.run_id).state()
            state = await _decide(tarry, settings, action)
        except TarryError as e:
            return _refusal(e)
        done, what = ("Approved" if action.approve else "Rejected"), "call"
        if any(p.call_id == action.call_id and p.guardrail for p in before.pending_approvals):
            done, what = ("Allowed" if action.approve else "Blocked"), "text"
        waiting = (
            f", waiting for {wait_kind(state.waiting_for).waits_for}" if state.waiting_for else ""
        )
        body = (
            f"<p>{done} {what} <code>{_e(action.call_id)}</code> as"
            f" <strong>{_e(action.user)}</strong>. The run is {_e(state.phase)}{_e(waiting)}:"
            f' <a href="/#/runs/{_e(action.run_id)}">open it</a>.</p>'
        )
        return _page(done, body)

    return router


async def _may_decide(
    tarry: Tarry, settings: TarrySettings, policy: Policy, action: Action
) -> None:
    """Refuses a link whose user may not decide the run's calls now (`tarry.api.rights`):
    one no longer among the API's users, a share taken back, a run never theirs. The run
    checks the call's approvers itself."""
    if action.user not in {caller.user for caller, _ in settings.api_users()}:
        # Links are made only for the users tokens name (`TarrySettings._links_problem`):
        # one whose token was taken away may no longer act through a link either.
        raise TarryError(
            ErrorCode.ACTION_LINK_INVALID,
            f"this link acts for {action.user!r}, who is no longer a user of this API (no"
            f" token of {settings.api_token_sources()} names them); decide in the inbox",
        )
    caller = settings.caller(action.user)
    writes = await check_run(tarry, policy, caller, action.run_id, Need.DECIDE)
    await check_decision(tarry, caller, action.run_id, action.call_id, writes=writes)


async def _decide(tarry: Tarry, settings: TarrySettings, action: Action) -> RunState:
    run = tarry.get(action.run_id, replace(settings.caller(action.user), door=Door.LINK))
    return await run.decide(action.call_id, approved=action.approve, source="link")


def _refusal(error: TarryError) -> HTMLResponse:
    body = f"<p><code>{_e(error.code)}</code>: {_e(error.message)}</p><p>Nothing was decided.</p>"
    return _page("Not decided", body, status_of(error.code))


def _page(title: str, body: str, status: int = HTTPStatus.OK) -> HTMLResponse:
    return HTMLResponse(_PAGE.format(title=_e(title), body=body), status_code=status)


def _e(text: str) -> str:
    return html.escape(text, quote=True)
