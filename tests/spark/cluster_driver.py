"""A load on Spark's `local-cluster` master: executors in JVM processes of their own,
their Python workers started by them, as on a real cluster (run as a process of its own
by test_local_cluster.py: one SparkContext a process).

    python -m tests.spark.cluster_driver BOOTSTRAP TOPIC LOAD_ID ROWS

Prints the executors' count (the driver's own block manager not counted) and the
load's result, as JSON on the last line.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    bootstrap, topic, load_id, rows = sys.argv[1:5]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from trio_kafka.spark import spark_session, write_dataframe

    spark = spark_session(
        "local-cluster[2,1,1024]",
        "trio-kafka on local-cluster",
        **{
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            # The executors' Python workers import trio_kafka from where the driver does.
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "spark.driver.memory": "1g",
        },
    )
    try:
        frame = spark.range(int(rows)).selectExpr(
            "concat('k', id % 997) AS key", "concat('v', id) AS value"
        )
        result = write_dataframe(
            frame, topic=topic, key="key", load_id=load_id, bootstrap=bootstrap
        )
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print(
            json.dumps(
                {
                    "executors": executors,
                    "guarantee": result.guarantee,
                    "loaded": result.loaded,
                    "skipped": result.skipped,
                }
            )
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
