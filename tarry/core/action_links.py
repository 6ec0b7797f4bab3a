"""Action links: a URL that decides one gated call, one way, as one person, without a
bearer token, so a button in a chat message can approve or reject.

The worker's `notify` activity signs one per pending call and decision (`sign`), and the
HTTP API checks it (`verify`) before it sends the decision, as the user it names, with
the run's `decide` update. The token holds no secret, only a claim and its HMAC under
the deployment's action key (`TARRY_ACTION_KEY`), which the workflow never sees: a
token in a chat channel's history decides nothing but that one call, and only until its
expiry. It is single-use without a store of used tokens: the run itself refuses a
second decision on a call (`APPROVAL_ALREADY_DECIDED`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass

from pydantic import SecretStr

from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError

__all__ = ["Action", "sign", "verify"]


@dataclass(frozen=True)
class Action:
    """What an action link decides: call `call_id` of run `run_id`, approved or not,
    as `user`, until `expires` (Unix seconds)."""

    run_id: str
    call_id: str
    approve: bool
    user: str
    expires: int


def sign(action: Action, key: SecretStr) -> str:
    """The link's token: the action, and its HMAC-SHA256 under `key`."""
    claim = json.dumps(asdict(action), separators=(",", ":"), sort_keys=True).encode()
    return f"{_b64(claim)}.{_b64(_mac(claim, key))}"


def verify(token: str, key: SecretStr | None, now: float) -> Action:
    """The action `token` signs; `ACTION_LINK_INVALID` for a token not signed with `key`
    (or no key), `ACTION_LINK_EXPIRED` for one past its expiry at `now`."""
    invalid = TarryError(
        ErrorCode.ACTION_LINK_INVALID,
        "this link is not one this server signed (altered, cut short, or made for"
        " another deployment); decide in the inbox instead",
    )
    if key is None:
        raise TarryError(
            ErrorCode.ACTION_LINK_INVALID,
            "this server has no action key (TARRY_ACTION_KEY), so it takes no action links",
        )
    claim_text, _, mac_text = token.partition(".")
    try:
        claim, mac = _unb64(claim_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        raise invalid from None
    # Compared in constant time: the answer's timing tells nothing of a forged MAC.
    if not hmac.compare_digest(mac, _mac(claim, key)):
        raise invalid
    try:
        action = Action(**json.loads(claim))
    except (ValueError, TypeError):
        raise invalid from None
    if now >= action.expires:
        raise TarryError(
            ErrorCode.ACTION_LINK_EXPIRED,
            f"this link expired; call {action.call_id!r} of run {action.run_id!r} is decided"
            " in the inbox, if it still waits",
        )
    return action


def _mac(claim: bytes, key: SecretStr) -> bytes:
    return hmac.new(key.get_secret_value().encode(), claim, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
