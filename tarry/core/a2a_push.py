"""The address and token of a remote A2A agent's push notifications to a run: the worker
gives both to the remote with the call's first message, the API's push route checks the
token. Both derive it from the action key they share, so no token is stored anywhere:
not in the run's history, not in a table.

And the other way, the tokens A2A clients give with the push configs of Tarry's own
tasks (`tarry.contracts.a2a_configs`): the API seals each under the action key before
the run records it, and the worker that sends the push opens it (`seal_token`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote

from cryptography.fernet import Fernet
from pydantic import SecretStr

__all__ = [
    "PUSH_TOKEN_HEADER",
    "open_token",
    "push_path",
    "push_token",
    "seal_token",
    "valid_push_token",
]

PUSH_TOKEN_HEADER = "X-A2A-Notification-Token"
"""The header A2A's push notifications carry the token in (the a2a-sdk's sender's)."""


def push_path(run_id: str, call: str) -> str:
    """The API's path a remote call's pushes go to (`tarry.api.a2a_push`)."""
    return f"/v1/a2a/push/{quote(run_id, safe='')}/{quote(call, safe='')}"


def push_token(key: SecretStr, run_id: str, call: str) -> str:
    """The token of `call`'s pushes: it names the run and the call, so a token one remote
    was given signals no other run or call."""
    claim = f"a2a-push\n{run_id}\n{call}".encode()
    return hmac.new(key.get_secret_value().encode(), claim, hashlib.sha256).hexdigest()


def valid_push_token(key: SecretStr | None, run_id: str, call: str, token: str | None) -> bool:
    """Whether `token` is the push token of `call` (never, without a key or a token)."""
    if key is None or token is None:
        return False
    return hmac.compare_digest(push_token(key, run_id, call), token)


def _fernet(key: SecretStr) -> Fernet:
    """The cipher of push configs' tokens: a key of its own, derived from the action key,
    so that a sealed token and an action link never share one."""
    derived = hmac.new(key.get_secret_value().encode(), b"a2a-push-config", hashlib.sha256)
    return Fernet(base64.urlsafe_b64encode(derived.digest()))


def seal_token(key: SecretStr, token: str) -> str:
    """`token`, encrypted and authenticated under `key`: what the run's history holds."""
    return _fernet(key).encrypt(token.encode()).decode()


def open_token(key: SecretStr, sealed: str) -> str:
    """The token `seal_token` sealed; `cryptography.fernet.InvalidToken` when `key` is
    not the one it was sealed under."""
    return _fernet(key).decrypt(sealed.encode()).decode()
