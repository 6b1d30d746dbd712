"""Hooks: let a test or a simulator intercept requests and shape the answers.

A hook is a function of a `HookCall` (which node, the decoded request, and in the AFTER
phase the response the handler produced) that returns what to do:

- `None`: let it through (the next hook runs, then the handler);
- a response message: answer with it instead (BEFORE: the request is not applied;
  AFTER: it was applied and the client sees this answer instead);
- `DROP`: close the connection without answering (BEFORE: nothing was applied; AFTER:
  "applied, then the connection died", the ambiguous case a client must survive);
- `BLACKHOLE`: never answer and keep the connection open (a request timeout);
- `Delay(seconds)`: wait, then go on with the next hook.

The function may be async. Hooks run in the order they were added; `times` limits how
often a hook fires (it is removed after), `node` restricts it to one broker. Hooks are
data (`Hook`) kept by the cluster; this module decides nothing about I/O itself.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from trio_kafka.protocol import RequestHeader


class Phase(enum.Enum):
    BEFORE = "before"  # the request is decoded, not yet applied
    AFTER = "after"  # applied; the response is built, not yet sent


class _Action(enum.Enum):
    DROP = "drop"
    BLACKHOLE = "blackhole"


DROP = _Action.DROP
BLACKHOLE = _Action.BLACKHOLE


@attrs.frozen
class Delay:
    seconds: float


@attrs.frozen
class HookCall:
    node_id: int
    header: RequestHeader
    request: Any
    # The handler's response (AFTER only; None before, and for acks=0 produce).
    response: Any = None

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def version(self) -> int:
        return self.header.api_version


HookResult = Any  # None | a response message | DROP | BLACKHOLE | Delay
HookFn = Callable[[HookCall], "HookResult | Awaitable[HookResult]"]


@attrs.define(eq=False)
class Hook:
    fn: HookFn
    # API key the hook applies to (None: every request).
    api_key: int | None = None
    phase: Phase = Phase.BEFORE
    node: int | None = None
    # How many more times it may fire (None: forever).
    times: int | None = None

    def matches(self, phase: Phase, node_id: int, api_key: int) -> bool:
        return (
            self.phase is phase
            and (self.api_key is None or self.api_key == api_key)
            and (self.node is None or self.node == node_id)
            and (self.times is None or self.times > 0)
        )


def api_key_of(api: Any) -> int | None:
    """`api` as an API key: None, an int, or a request class (e.g. ProduceRequest)."""
    if api is None or isinstance(api, int):
        return api
    key = getattr(api, "API_KEY", None)
    if not isinstance(key, int):
        raise TypeError(f"api must be None, an API key or a request class, got {api!r}")
    return key
