"""The rules a deciding object takes: its own part of the client's rules, or those a
harness put in effect, and never a wrong kind silently."""

from __future__ import annotations

import random

import pytest

from trio_kafka.core import (
    ProducerConfig,
    ProducerCore,
    Rules,
    TransactionManager,
    current_rules,
    rules_in_effect,
)
from trio_kafka.core._core import CoreRules
from trio_kafka.core._load import LoadRules
from trio_kafka.core._rule_context import installing, rules_for
from trio_kafka.core._sequencer import SequencerRules
from trio_kafka.core._transaction import TransactionRules


class _Marked(Rules):
    """Rules a harness could put in effect (the client's, under another class)."""


def test_rules_gathers_every_part() -> None:
    for part in (CoreRules, SequencerRules, TransactionRules, LoadRules):
        assert issubclass(Rules, part)


def test_without_a_harness_each_object_follows_its_own_part_of_the_shipped_rules() -> None:
    core = ProducerCore(ProducerConfig(), random.Random(0))
    assert type(core.rules) is CoreRules
    assert type(core.sequencing.rules) is CoreRules  # the core hands its rules on
    assert type(TransactionManager("t").rules) is TransactionRules
    assert type(current_rules()) is Rules


def test_rules_in_effect_reach_every_object_built_in_the_block_and_no_other() -> None:
    marked = _Marked()
    with rules_in_effect(marked):
        core = ProducerCore(ProducerConfig(), random.Random(0))
        manager = TransactionManager("t")
        assert current_rules() is marked
    assert core.rules is marked
    assert core.sequencing.rules is marked
    assert manager.rules is marked
    assert type(ProducerCore(ProducerConfig(), random.Random(0)).rules) is CoreRules


def test_rules_of_the_wrong_kind_are_refused_by_name() -> None:
    with installing(object()), pytest.raises(TypeError, match="are not CoreRules"):
        rules_for(CoreRules)
