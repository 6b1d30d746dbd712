"""The Spark data source's options: what `.option(...)` takes, parsed once on the driver
and handed to every task (a module of its own so the driver's side, `_source`, and the
tasks' side, `_task`, both read it without importing each other)."""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from trio_kafka.client import GUARANTEES
from trio_kafka.errors import ConfigError
from trio_kafka.spark._manifest import CONTROL_TOPIC

#: The data source's name (`spark.write.format(NAME)`).
NAME = "trio-kafka"
AUTO = "auto"
EXACTLY_ONCE = "exactly_once_cas"
TRANSACTIONAL = "transactional"
#: Accepted for `guarantee` (plus "exactly_once", the name before issue 12).
_ALIASES = {"exactly_once": EXACTLY_ONCE}


@dataclasses.dataclass
class LoadOptions:
    """The writer's options (all strings in Spark; parsed once on the driver)."""

    bootstrap: str
    topic: str
    load_id: str
    guarantee: str = AUTO
    control_topic: str = CONTROL_TOPIC
    batch_bytes: int = 512 * 1024
    request_timeout: float = 30.0
    transaction_timeout: float = 600.0
    max_attempts: int = 8
    #: What made the rows (JSON object; `write_dataframe` sets it: key and value
    #: columns, order_by): recorded in the manifest and the checkpoints, and a resume
    #: with another is refused.
    routing: str = ""
    #: Test-only: task failures (`_task.FailurePlan`), and killing the driver's process
    #: group (`crash_driver_pgid`, default the committing process's) after this many
    #: EndTxn(commit)s (0: never).
    fail: str = ""
    crash_driver_after_commits: int = 0
    crash_driver_pgid: int = 0

    @classmethod
    def parse(cls, options: dict[str, str]) -> LoadOptions:
        """Parse Spark's string options, refusing an unknown name (with the nearest known
        one) or a value of the wrong form with a `ConfigError` that names the option."""
        opts = {k.lower(): v for k, v in options.items()}
        missing = [name for name in ("bootstrap", "topic") if not opts.get(name)]
        if missing:
            raise ConfigError(
                f"the {NAME} data source needs the option(s) {', '.join(missing)}: "
                '.option("bootstrap", "host:9092").option("topic", "t")'
            )
        if "batch_records" in opts:
            raise ConfigError(
                "the option batch_records is gone: batches are cut by bytes now "
                "(batch_bytes, default 524288)"
            )
        unknown = sorted(set(opts) - _KNOWN)
        if unknown:
            hints = [
                f"{name!r}" + "".join(f" (did you mean {m!r}?)" for m in _near(name))
                for name in unknown
            ]
            raise ConfigError(
                f"the {NAME} data source has no option {', '.join(hints)}; "
                f"it takes {', '.join(sorted(_KNOWN))}"
            )
        guarantee = _ALIASES.get(opts.get("guarantee", AUTO), opts.get("guarantee", AUTO))
        if guarantee not in GUARANTEES:
            raise ConfigError(f"guarantee={guarantee!r}: use one of {', '.join(GUARANTEES)}")
        routing = opts.get("routing", "") or ""
        try:
            fields = json.loads(routing) if routing else {}
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            raise ConfigError(
                f"option routing={routing!r}: expected a JSON object (what made the rows, "
                'e.g. {"key": "user"})'
            )
        return cls(
            bootstrap=opts["bootstrap"],
            topic=opts["topic"],
            load_id=opts.get("load_id", ""),
            guarantee=guarantee,
            control_topic=opts.get("control_topic", CONTROL_TOPIC) or CONTROL_TOPIC,
            batch_bytes=_number(opts, "batch_bytes", int, 512 * 1024, 1),
            request_timeout=_number(opts, "request_timeout", float, 30.0, 0.001),
            transaction_timeout=_number(opts, "transaction_timeout", float, 600.0, 0.001),
            max_attempts=_number(opts, "max_attempts", int, 8, 1),
            routing=routing,
            fail=opts.get("fail", ""),
            crash_driver_after_commits=_number(opts, "crash_driver_after_commits", int, 0, 0),
            crash_driver_pgid=_number(opts, "crash_driver_pgid", int, 0, 0),
        )

    def routing_fields(self) -> dict[str, object]:
        """The `routing` option as a dict (checked by `parse`)."""
        fields: dict[str, object] = json.loads(self.routing) if self.routing else {}
        return fields


_KNOWN = frozenset(field.name for field in dataclasses.fields(LoadOptions))


def _near(name: str) -> list[str]:
    return difflib.get_close_matches(name, sorted(_KNOWN), n=1, cutoff=0.6)


_N = TypeVar("_N", int, float)


def _number(
    opts: dict[str, Any], name: str, kind: Callable[[str], _N], default: _N, least: _N
) -> _N:
    """Option `name` as an int or float of at least `least` (Spark hands over strings)."""
    raw = opts.get(name)
    if raw is None:
        return default
    what = "an integer" if kind is int else "a number"
    try:
        value = kind(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name}={raw!r}: expected {what} >= {least}") from None
    if not value >= least:  # NaN too
        raise ConfigError(f"option {name}={raw!r}: expected {what} >= {least}")
    return value


__all__ = ["AUTO", "EXACTLY_ONCE", "NAME", "TRANSACTIONAL", "LoadOptions"]
