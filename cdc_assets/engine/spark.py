"""One Spark session per process, configured from cdc.yaml and the environment."""
from __future__ import annotations

import os
import sys

DEFAULTS = {
    "spark.master": "local[2]",
    "spark.app.name": "cdc_assets",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


def spark_settings(config_spark: dict | None = None) -> dict:
    """Defaults < cdc.yaml `spark:` < environment (CDC_ASSETS_SPARK_MASTER, SPARK_REMOTE)."""
    conf = dict(DEFAULTS)
    conf.update(config_spark or {})
    if os.environ.get("CDC_ASSETS_SPARK_MASTER"):
        conf["spark.master"] = os.environ["CDC_ASSETS_SPARK_MASTER"]
    remote = os.environ.get("SPARK_REMOTE") or conf.get("spark.remote")
    if remote:
        # Spark Connect: the server owns master and driver settings.
        conf = {k: v for k, v in conf.items() if k in ("spark.app.name", "spark.sql.session.timeZone", "spark.sql.shuffle.partitions")}
        conf["spark.remote"] = remote
    prepare_environment()
    return conf


def prepare_environment() -> None:
    # Python workers must run this interpreter, or they miss pyarrow (FIELD_NOTES).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
