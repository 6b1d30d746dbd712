"""DescribeConfigs (API key 32), v0-4: topic configs (resource type 2) and a broker's
(type 4, a few read-only values)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)

REQUEST = DescribeConfigsRequest

_TOPIC = 2
_BROKER = 4
# ConfigSource values (v1+).
_DYNAMIC_TOPIC = 1
_STATIC_BROKER = 4
_DEFAULT = 5


def _failed(res: DescribeConfigsResource, error: ErrorCode, message: str) -> DescribeConfigsResult:
    return DescribeConfigsResult(
        error_code=error,
        error_message=message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
    )


def handle(ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    state = ctx.state
    results = []
    for res in req.resources:
        if res.resource_type == _TOPIC:
            topic = state.topics.get(res.resource_name)
            if topic is None:
                results.append(
                    _failed(
                        res,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"unknown topic {res.resource_name!r}",
                    )
                )
                continue
            values = topic.config.describe()
            read_only = False
        elif res.resource_type == _BROKER:
            opts = state.options
            values = {
                "auto.create.topics.enable": (str(opts.auto_create_topics).lower(), False),
                "num.partitions": (str(opts.default_partitions), False),
                "transaction.max.timeout.ms": (str(state.txn.max_timeout_ms), True),
            }
            read_only = True
        else:
            results.append(
                _failed(
                    res,
                    ErrorCode.INVALID_REQUEST,
                    f"resource type {res.resource_type} is not supported",
                )
            )
            continue
        keys = res.configuration_keys
        configs = []
        for name, (value, is_default) in sorted(values.items()):
            if keys is not None and name not in keys:
                continue
            if is_default:
                source = _DEFAULT
            else:
                source = _DYNAMIC_TOPIC if res.resource_type == _TOPIC else _STATIC_BROKER
            configs.append(
                DescribeConfigsResourceResult(
                    name=name,
                    value=value,
                    read_only=read_only,
                    is_default=is_default,
                    config_source=source,
                )
            )
        results.append(
            DescribeConfigsResult(
                error_code=ErrorCode.NONE,
                error_message=None,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=configs,
            )
        )
    return DescribeConfigsResponse(results=results)
