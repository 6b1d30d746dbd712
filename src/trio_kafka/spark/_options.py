"""The Spark data source's options: what `.option(...)` takes, parsed once on the driver
and handed to every task (a module of its own so the driver's side, `_source`, and the
tasks' side, `_task`, both read it without importing each other)."""

from __future__ import annotations

import dataclasses

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
    #: Test-only: task failures (`_task.FailurePlan`), and killing the driver's process
    #: group (`crash_driver_pgid`, default the committing process's) after this many
    #: EndTxn(commit)s (0: never).
    fail: str = ""
    crash_driver_after_commits: int = 0
    crash_driver_pgid: int = 0

    @classmethod
    def parse(cls, options: dict[str, str]) -> LoadOptions:
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
        guarantee = _ALIASES.get(opts.get("guarantee", AUTO), opts.get("guarantee", AUTO))
        if guarantee not in GUARANTEES:
            raise ConfigError(f"guarantee={guarantee!r}: use one of {', '.join(GUARANTEES)}")
        return cls(
            bootstrap=opts["bootstrap"],
            topic=opts["topic"],
            load_id=opts.get("load_id", ""),
            guarantee=guarantee,
            control_topic=opts.get("control_topic", CONTROL_TOPIC),
            batch_bytes=int(opts.get("batch_bytes", 512 * 1024)),
            request_timeout=float(opts.get("request_timeout", 30.0)),
            transaction_timeout=float(opts.get("transaction_timeout", 600.0)),
            max_attempts=int(opts.get("max_attempts", 8)),
            fail=opts.get("fail", ""),
            crash_driver_after_commits=int(opts.get("crash_driver_after_commits", 0)),
            crash_driver_pgid=int(opts.get("crash_driver_pgid", 0)),
        )


__all__ = ["AUTO", "EXACTLY_ONCE", "NAME", "TRANSACTIONAL", "LoadOptions"]
