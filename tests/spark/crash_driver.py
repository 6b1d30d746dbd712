"""A Spark driver that dies between two EndTxns (run as a process of its own by
test_driver_crash.py: it kills its whole process group, the JVM included).

    python -m tests.spark.crash_driver BOOTSTRAP TOPIC LOAD_ID ROWS COMMITS
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, topic, load_id, rows, commits = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from trio_kafka.spark import spark_session, write_dataframe

    spark = spark_session(
        "local[2]",
        "trio-kafka crashing driver",
        **{"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g"},
    )
    frame = spark.range(int(rows)).selectExpr("concat('k', id) AS key", "concat('v', id) AS value")
    write_dataframe(
        frame,
        topic=topic,
        key="key",
        load_id=load_id,
        bootstrap=bootstrap,
        guarantee="transactional",
        crash_driver_after_commits=int(commits),
        crash_driver_pgid=os.getpgrp(),
    )
    raise SystemExit("the driver was meant to die during commit()")


if __name__ == "__main__":
    main()
