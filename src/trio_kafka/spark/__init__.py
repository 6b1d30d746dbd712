"""PySpark integration: exactly-once bulk loads of DataFrames, and simulation sweeps.

Needs the extra `trio-kafka[spark]` (`pyspark[sql]>=4.1`). See docs/spark.md.
This module only re-exports.
"""

from __future__ import annotations

from trio_kafka.spark._frame import (
    foreach_batch_writer,
    kafka_partition,
    prepare_dataframe,
    topic_partitions,
    write_dataframe,
)
from trio_kafka.spark._manifest import CONTROL_TOPIC, Manifest, read_manifest
from trio_kafka.spark._source import (
    EXACTLY_ONCE,
    NAME,
    TRANSACTIONAL,
    KafkaDataSource,
    LoadCommitMessage,
    LoadError,
)
from trio_kafka.spark._sweep import (
    run_seeds_on_spark,
    simulate_on_spark,
    simulate_seed,
    spark_session,
)
from trio_kafka.spark._wire import (
    LOAD_HEADER,
    ROW_HEADER,
    CasPartitionWriter,
    FailurePlan,
    InjectedFailure,
    PartitionReport,
    TxnPartitionWriter,
    end_transaction,
    load_row,
)

__all__ = [
    "CONTROL_TOPIC",
    "EXACTLY_ONCE",
    "LOAD_HEADER",
    "NAME",
    "ROW_HEADER",
    "TRANSACTIONAL",
    "CasPartitionWriter",
    "FailurePlan",
    "InjectedFailure",
    "KafkaDataSource",
    "LoadCommitMessage",
    "LoadError",
    "Manifest",
    "PartitionReport",
    "TxnPartitionWriter",
    "end_transaction",
    "foreach_batch_writer",
    "kafka_partition",
    "load_row",
    "prepare_dataframe",
    "read_manifest",
    "run_seeds_on_spark",
    "simulate_on_spark",
    "simulate_seed",
    "spark_session",
    "topic_partitions",
    "write_dataframe",
]
