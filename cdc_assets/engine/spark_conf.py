"""The settings a Spark driver of our own runs with: the in-process session's and the Spark
Connect server's (engine/spark.py, engine/connect.py)."""
from __future__ import annotations

from .settings import settings

DEFAULTS = {
    "spark.master": "local[2]",
    "spark.app.name": "cdc_assets",
    "spark.ui.enabled": "false",
    # Many small shuffle tasks, which adaptive execution merges when data is small: whole-table
    # builds then fit in a small driver or executor heap.
    "spark.sql.shuffle.partitions": "64",
    "spark.sql.adaptive.enabled": "true",
    # ... including in a cached frame: else a cache keeps all 64 partitions, and every job over it
    # pays 64 tasks (on a 2-core box, a catch-up apply of 200k changes took 55 s instead of 38 s).
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


def in_process_settings(config_spark: dict | None = None) -> dict:
    """Defaults < cdc.yaml `spark:` < CDC_ASSETS_SPARK_MASTER: what a driver of our own runs with."""
    conf = dict(DEFAULTS)
    conf.update(config_spark or {})
    master = settings().spark_master
    if master:
        conf["spark.master"] = master
    return conf
