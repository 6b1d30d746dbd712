"""PySpark integration: exactly-once bulk loads of DataFrames, and simulation sweeps.

Needs the extra `trio-kafka[spark]` (`pyspark[sql]>=4.1`). See docs/spark.md.
This module only re-exports.
"""

from __future__ import annotations

from trio_kafka.spark._frame import (
    DataFrameLoadResult,
    foreach_batch_writer,
    kafka_partition,
    number_rows,
    prepare_dataframe,
    topic_partitions,
    write_dataframe,
)
from trio_kafka.spark._manifest import CONTROL_TOPIC, LoadState, Manifest, Winner, read_manifest
from trio_kafka.spark._options import AUTO, EXACTLY_ONCE, NAME, TRANSACTIONAL
from trio_kafka.spark._source import (
    KafkaDataSource,
    LoadCommitMessage,
    LoadError,
)
from trio_kafka.spark._sweep import (
    SEEDS_PER_JOB,
    iter_seeds_on_spark,
    run_seeds_on_spark,
    simulate_on_spark,
    simulate_seed,
    spark_session,
    sweep_on_spark,
)
from trio_kafka.spark._task import (
    FailurePlan,
    InjectedFailure,
    PartitionReport,
    chunks_of,
    transactional_id,
)

__all__ = [
    "AUTO",
    "CONTROL_TOPIC",
    "EXACTLY_ONCE",
    "NAME",
    "SEEDS_PER_JOB",
    "TRANSACTIONAL",
    "DataFrameLoadResult",
    "FailurePlan",
    "InjectedFailure",
    "KafkaDataSource",
    "LoadCommitMessage",
    "LoadError",
    "LoadState",
    "Manifest",
    "PartitionReport",
    "Winner",
    "chunks_of",
    "foreach_batch_writer",
    "iter_seeds_on_spark",
    "kafka_partition",
    "number_rows",
    "prepare_dataframe",
    "read_manifest",
    "run_seeds_on_spark",
    "simulate_on_spark",
    "simulate_seed",
    "spark_session",
    "sweep_on_spark",
    "topic_partitions",
    "transactional_id",
    "write_dataframe",
]
