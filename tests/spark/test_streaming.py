"""Streaming: each micro-batch is a load named after its batch id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.spark import foreach_batch_writer


def _run(spark: Any, source: Path, checkpoint: Path, bootstrap: str) -> None:
    stream = (
        spark.readStream.schema("key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    query = (
        stream.writeStream.foreachBatch(
            foreach_batch_writer(topic="stream", bootstrap=bootstrap, load_id="q1", key="key")
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None


def test_micro_batches_load_once_across_restarts(
    spark: Any, broker: ThreadedCluster, tmp_path: Path
) -> None:
    create_topic(broker, "stream", 2, cas=True)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for n in range(2):
        lines = [json.dumps({"key": f"k{n}-{i}", "value": f"v{n}-{i}"}) for i in range(50)]
        (source / f"part-{n}.json").write_text("\n".join(lines) + "\n")
    _run(spark, source, checkpoint, broker.bootstrap)
    _run(spark, source, checkpoint, broker.bootstrap)  # restart: nothing new
    log = read_topic(broker.bootstrap, "stream", 2)
    values = sorted(r.value for records in log.values() for r in records)
    assert values == sorted(f"v{n}-{i}".encode() for n in range(2) for i in range(50))
    loads = {
        h[1] for records in log.values() for r in records for h in r.headers if h[0] == "tk.load"
    }
    assert loads == {b"q1-0", b"q1-1"}
