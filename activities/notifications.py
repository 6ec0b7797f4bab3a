"""The `notify` activity: tells the receivers of the worker's `[[notify]]` entries of a
run's stop point, with a signed POST each.

The body is JSON: `{event, run_id, phase, waiting_for, pending_approvals, summary,
links}` (or Slack's incoming-webhook blocks, for `format = "slack"`). Each request has
`Tarry-Event-Id`, the same on every retry, and `Tarry-Signature: t=<unix>,v1=<hex>`, the
HMAC-SHA256 of `f"{t}.{body}"` under the entry's secret, so a receiver knows it came from
here, unaltered and recent (`signature`).

Temporal retries the activity with backoff while a receiver is down (`workflows.
notifications` sets the policy); an attempt heartbeats the entries that took it, so the
next one posts only to the others, and a worker that dies mid-attempt is noticed within
seconds. A receiver that refuses (4xx but 408 and 429) is not asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import traces
from tarry.config.settings import NotifyTarget, TarrySettings
from tarry.contracts import (
    NOTIFY_ACTIVITY,
    ErrorCode,
    Notification,
    NotifyEvent,
    PendingApproval,
    may_decide,
)
from tarry.core.action_links import Action, sign
from tarry.core.ownership import RunAccess

__all__ = [
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "Notifier",
    "Refused",
    "check_answer",
    "failure_of",
    "heartbeating",
    "signature",
]

EVENT_ID_HEADER = "Tarry-Event-Id"
SIGNATURE_HEADER = "Tarry-Signature"
REQUEST_TIMEOUT = 10.0
"""Seconds a receiver has to answer one POST."""
_HEARTBEAT_EVERY = 1.0
_RETRIED = frozenset({HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.TOO_MANY_REQUESTS})

_TITLES = {
    NotifyEvent.WAITING_FOR_INPUT: "waits for a reply",
    NotifyEvent.WAITING_FOR_APPROVAL: "waits for an approval",
    NotifyEvent.WAITING_FOR_BUDGET: "waits for its budget to be raised",
    NotifyEvent.WAITING_FOR_AUTH: "waits for a person to connect their account",
    NotifyEvent.ENDED: "has ended",
}


def signature(secret: str, body: bytes, t: int) -> str:
    """`Tarry-Signature`'s value for `body` sent at Unix time `t`."""
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


class Refused(Exception):
    """A receiver's answer that another attempt would get again."""


def check_answer(status: int, where: str) -> None:
    """Raises for a receiver's answer that is no success: `httpx.HTTPError` for one
    another attempt may change (5xx, 408, 429), `Refused` for any other."""
    if status < 300:
        return
    if status >= 500 or status in _RETRIED:
        raise httpx.HTTPError(f"{where} answered {status}")
    raise Refused(f"{where} refused it with {status}")


def failure_of(outcomes: Sequence[object]) -> ApplicationError | None:
    """The attempt's failure, from its posts' outcomes: retried unless every receiver that
    failed refused (`NOTIFY_FAILED`); None when all took it. An error of another kind
    than a receiver's answer is raised as it is."""
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if not failures:
        return None
    for failure in failures:
        if not isinstance(failure, (Refused, httpx.HTTPError)):
            raise failure
    return ApplicationError(
        "; ".join(str(f) or type(f).__name__ for f in failures),
        type=ErrorCode.NOTIFY_FAILED,
        non_retryable=all(isinstance(f, Refused) for f in failures),
    )


class Notifier:
    """The `[[notify]]` entries of `settings` and what their links need: the public URL,
    the action key and the groups of the users notifications are for."""

    def __init__(self, settings: TarrySettings, http: httpx.AsyncClient) -> None:
        self._settings = settings
        self._policy = settings.policy()
        self._targets = settings.notify_targets()
        self._http = http

    @property
    def events(self) -> list[NotifyEvent]:
        """The events some entry wants: what a run learns with its catalogue."""
        return sorted({event for target in self._targets for event in target.events})

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def notify(self, notification: Notification) -> None:
        """Posts `notification` to every entry that wants its event and has not taken it."""
        details = activity.info().heartbeat_details
        taken: set[str] = set(details[0]) if details else set()
        wanted = [
            (i, t)
            for i, t in enumerate(self._targets)
            if notification.event in t.events and self._may_read(notification, t)
        ]
        waiting = [(i, t) for i, t in wanted if _key(t) not in taken]

        async def deliver(index: int, target: NotifyTarget) -> None:
            await self._post(notification, index, target)
            taken.add(_key(target))

        with traces.notification(notification) as span:
            async with heartbeating(taken):
                outcomes = await asyncio.gather(
                    *(deliver(i, t) for i, t in waiting), return_exceptions=True
                )
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            traces.notified(span, len(waiting), len(failed))
        if failure := failure_of(outcomes):
            raise failure

    async def _post(self, notification: Notification, index: int, target: NotifyTarget) -> None:
        payload = self.payload(notification, target)
        body = json.dumps(payload if target.format == "json" else _slack(notification, payload))
        headers = {
            "Content-Type": "application/json",
            EVENT_ID_HEADER: notification.id,
            "Tarry-Event": notification.event,
        }
        if target.secret is not None:
            secret = target.secret.get_secret_value()
            headers[SIGNATURE_HEADER] = signature(secret, body.encode(), int(time.time()))
        # The URL is not named in errors: a Slack webhook's URL is its secret.
        where = f"[[notify]] entry {index + 1}"
        try:
            response = await self._http.post(
                target.url, content=body, headers=headers, timeout=REQUEST_TIMEOUT
            )
        except httpx.HTTPError as e:
            raise httpx.HTTPError(f"{where} did not answer: {type(e).__name__}") from None
        check_answer(response.status_code, where)

    def payload(self, notification: Notification, target: NotifyTarget) -> dict[str, Any]:
        """The JSON a receiver of `target` gets (one who may read the run): the stop
        point, and its links."""
        base = self._settings.public_url()
        # Who may use the run decides the links; it is not news to the receiver.
        data = notification.model_dump(mode="json", exclude={"id", "owner", "readers", "writers"})
        data["pending_approvals"] = [
            {
                # Its preview's summary alone: `links.run` shows the whole.
                **call.model_dump(mode="json", exclude={"preview": {"blocks"}}),
                "links": self._action_links(notification, call, target),
            }
            for call in notification.pending_approvals
        ]
        data["links"] = {"run": f"{base}/#/runs/{quote(notification.run_id, safe='')}"}
        # The connect link works only for the person it names, signed in: no secret in it.
        run = quote(notification.run_id, safe="")
        if needs := notification.auth_needed:
            data["auth_needed"] = [
                {**need.model_dump(mode="json"), "connect": base + need.connect_path(run)}
                for need in needs
            ]
        return data

    def _may_read(self, notification: Notification, target: NotifyTarget) -> bool:
        """Whether `target` may be told of the run: an entry without `to` is the
        operator's, one with `to` is that user's, who is told only of the runs they may
        read. A notification carries the run's words (its last answer, the arguments of
        the calls it waits on), so it is not sent at all to a user who may not read them:
        even its id and that it stopped are the run's, as the API's 404 keeps them."""
        if target.to is None:
            return True
        return self._policy.may_read(self._settings.caller(target.to), _access(notification))

    def _action_links(
        self, notification: Notification, call: PendingApproval, target: NotifyTarget
    ) -> dict[str, str]:
        """Approve and reject URLs deciding `call` as the entry's `to` user, when there is
        one, an action key signs them and the user may decide the call: one of its
        approvers (if it has any) who may change the run, or is named among them."""
        key = self._settings.action_key()
        if target.to is None or key is None:
            return {}
        caller = self._settings.caller(target.to)
        if not may_decide(call.approvers, caller.user, caller.groups):
            return {}
        if not call.approvers and not self._policy.may_write(caller, _access(notification)):
            return {}
        # A call without a deadline waits for good; its link does not.
        ttl = self._settings.tarry_action_link_ttl
        expires = call.deadline.timestamp() if call.deadline else time.time() + ttl
        base = self._settings.public_url()
        return {
            decision: f"{base}/v1/actions/"
            + sign(
                Action(
                    run_id=notification.run_id,
                    call_id=call.call_id,
                    approve=decision == "approve",
                    user=target.to,
                    expires=int(expires),
                ),
                key,
            )
            for decision in ("approve", "reject")
        }


def _access(notification: Notification) -> RunAccess:
    return RunAccess(
        notification.owner, frozenset(notification.readers), frozenset(notification.writers)
    )


def _key(target: NotifyTarget) -> str:
    """How an attempt's heartbeat names an entry that took the notification: a digest,
    since heartbeat details reach history and a Slack webhook's URL is its secret."""
    return hashlib.sha256(target.url.encode()).hexdigest()[:16]


@contextlib.asynccontextmanager
async def heartbeating(taken: set[str]) -> AsyncIterator[None]:
    """Heartbeats the entries that took the notification, every second, while the body runs."""

    async def beat() -> None:
        while True:
            activity.heartbeat(sorted(taken))
            await asyncio.sleep(_HEARTBEAT_EVERY)

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
        activity.heartbeat(sorted(taken))


def _slack(notification: Notification, payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming webhook's message: the summary, a button to the run, and approve
    and reject buttons for each call its links decide."""
    title = f"Run {notification.run_id} {_TITLES[notification.event]}"
    buttons: list[dict[str, Any]] = [_button("Open the run", payload["links"]["run"])]
    for call in payload["pending_approvals"]:
        links: dict[str, str] = call["links"]
        # A text a guardrail holds is allowed or blocked; a call, approved or rejected.
        yes, no = ("Allow", "Block") if call.get("guardrail") else ("Approve", "Reject")
        if links:
            buttons.append(_button(f"{yes} {call['tool']}", links["approve"], "primary"))
            buttons.append(_button(f"{no} {call['tool']}", links["reject"], "danger"))
    for need in payload.get("auth_needed", []):
        buttons.append(_button(f"Connect {need['server']}", need["connect"], "primary"))
    text = f"*{_escape(title)}*\n{_escape(notification.summary)}"
    return {
        "text": f"{title}: {notification.summary}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": buttons[:_SLACK_MAX_ELEMENTS]},
        ],
    }


_SLACK_MAX_ELEMENTS = 25
_SLACK_MAX_BUTTON_TEXT = 75


def _button(text: str, url: str, style: str | None = None) -> dict[str, Any]:
    label = text[:_SLACK_MAX_BUTTON_TEXT]
    button: dict[str, Any] = {"type": "button", "text": {"type": "plain_text", "text": label}}
    button["url"] = url
    if style is not None:
        button["style"] = style
    return button


def _escape(text: str) -> str:
    """Slack's mrkdwn takes `&`, `<` and `>` as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
