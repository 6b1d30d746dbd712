"""`import trio_kafka` is the user's API: every type its public signatures name is
importable from it, and it exports nothing private.

The signatures are read from the code (`typing.get_type_hints`), so a new public
function or method whose signature names a type `trio_kafka` does not export fails
here. What counts as public: every function and class `trio_kafka` exports; of a
class, its methods and properties without a leading underscore, the dunders a user
calls (`await`, `async with`, iteration), its annotated attributes without a leading
underscore, and its constructor unless the class is made for the user by one of our
calls (`MADE_BY` below: its constructor's arguments are the library's own).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import trio_kafka
import trio_kafka.client

# Classes a user gets from one of our calls and never constructs.
MADE_BY = {
    "BulkDelivery": "Producer.send_many",
    "BulkLoader": "open_bulk_loader",
    "ConditionalWriter": "open_conditional_writer",
    "DeliveryHandle": "Producer.send",
    "FetchResult": "PartitionReader.fetch",
    "KafkaSelector": "open_selector",
    "PartitionRead": "PartitionReader.read",
    "Producer": "open_producer",
    "RecordHandle": "Producer.send",
}
# Exported so that users can name and pass them (a shared selector; a test harness's
# rules and fault hook): their own methods and fields serve the library (connections,
# metadata; the simulator's planted bugs), and are not part of the user's API.
OPAQUE = {"Harness", "KafkaSelector"}
# Attributes without a leading underscore that are the library's own state, not the
# user's API: their owners are to make them private (issue 34); skipped until then.
NOT_YET_PRIVATE = {
    "PartitionRead": {"reader"},  # the PartitionReader it reads for, as its Fetcher seam
    # The record's batch (a handle is a struct: its fields are annotated, as its slots
    # were not); `outcome`, `done()` and `result()` are the handle's API.
    "DeliveryHandle": {"batch"},
    "RecordHandle": {"batch"},
}
# The dunders a user calls on our objects.
USER_DUNDERS = {
    "__init__",
    "__call__",
    "__await__",
    "__aenter__",
    "__aexit__",
    "__aiter__",
    "__anext__",
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
}


def exported() -> dict[str, Any]:
    return {name: getattr(trio_kafka, name) for name in trio_kafka.__all__}


def signatures(name: str, obj: Any) -> Iterator[tuple[str, Callable[..., Any] | type]]:
    """(where, a callable or class whose annotations are public) for one export."""
    if inspect.isfunction(obj):
        yield name, obj
        return
    if not inspect.isclass(obj) or name in OPAQUE:
        return
    yield name, obj  # its annotated attributes
    for member_name, member in inspect.getmembers(obj):
        if member_name.startswith("_") and member_name not in USER_DUNDERS:
            continue
        if member_name == "__init__" and (name in MADE_BY):
            continue
        if isinstance(member, property):
            member = member.fget
        if not (inspect.isfunction(member) or inspect.ismethod(member)):
            continue
        if not getattr(member, "__module__", "").startswith("trio_kafka"):
            continue  # inherited from the standard library (Enum, tuple, Exception)
        yield f"{name}.{member_name}", member


def public_hints(target: Callable[..., Any] | type) -> dict[str, Any]:
    hints = typing.get_type_hints(target)
    if isinstance(target, type):
        skipped = NOT_YET_PRIVATE.get(target.__name__, set())
        return {k: v for k, v in hints.items() if not k.startswith("_") and k not in skipped}
    return hints


def named_types(hint: Any) -> Iterator[type]:
    """Every class a type hint names, however nested (generics, unions, callables)."""
    if isinstance(hint, type) and not isinstance(hint, types.GenericAlias):
        yield hint
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        yield origin
    for arg in typing.get_args(hint):
        if isinstance(arg, list):  # Callable's parameter list
            for inner in arg:
                yield from named_types(inner)
        else:
            yield from named_types(arg)


def ours(cls: type) -> bool:
    return cls.__module__ == "trio_kafka" or cls.__module__.startswith("trio_kafka.")


def test_every_type_a_public_signature_names_is_exported_by_trio_kafka() -> None:
    missing: dict[str, list[str]] = {}
    for name, obj in exported().items():
        for where, target in signatures(name, obj):
            try:
                hints = public_hints(target)
            except NameError as exc:  # a name imported only for the type checker
                missing.setdefault(str(exc), []).append(where)
                continue
            for field, hint in hints.items():
                for cls in named_types(hint):
                    if ours(cls) and getattr(trio_kafka, cls.__name__, None) is not cls:
                        missing.setdefault(cls.__qualname__, []).append(f"{where} ({field})")
    assert not missing, "\n".join(
        f"{cls} is not exported by trio_kafka, but {', '.join(uses)} names it"
        for cls, uses in sorted(missing.items())
    )


def test_the_check_sees_a_signature_that_names_an_unexported_type() -> None:
    class Hidden:
        pass

    def public(value: list[Hidden] | None) -> dict[str, Callable[[Hidden], int]]:
        raise NotImplementedError

    Hidden.__module__ = "trio_kafka.client._somewhere"
    found = [
        cls
        for hint in typing.get_type_hints(public, localns={"Hidden": Hidden}).values()
        for cls in named_types(hint)
    ]
    assert Hidden in found and not getattr(trio_kafka, "Hidden", None)


def test_the_classes_made_by_our_calls_are_exported_with_their_makers() -> None:
    for name, maker in MADE_BY.items():
        assert name in trio_kafka.__all__, name
        owner, _, method = maker.partition(".")
        assert owner in trio_kafka.__all__, maker
        if method:
            assert callable(getattr(getattr(trio_kafka, owner), method)), maker


def test_trio_kafka_exports_no_private_name_and_every_name_it_lists() -> None:
    assert all(not name.startswith("_") or name == "__version__" for name in trio_kafka.__all__)
    assert len(set(trio_kafka.__all__)) == len(trio_kafka.__all__)
    for name in trio_kafka.__all__:
        assert hasattr(trio_kafka, name), name


def test_what_trio_kafka_exports_from_the_client_the_client_exports() -> None:
    for name, obj in exported().items():
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("trio_kafka.client"):
            assert getattr(trio_kafka.client, name, None) is obj, name
