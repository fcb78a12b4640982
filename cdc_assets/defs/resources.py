"""Resources: one lazily started Spark session per run (dagster-pyspark)."""
from __future__ import annotations

from dagster_pyspark import LazyPySparkResource

from ..core.config import Config
from ..engine.spark import spark_settings


def spark_resource(cfg: Config) -> LazyPySparkResource:
    # Lazy: sensors and checks that only read Delta never pay Spark's start-up.
    return LazyPySparkResource(spark_config=spark_settings(cfg.spark))


def spark_session(resource: LazyPySparkResource):
    session = resource.spark_session
    try:
        session.sparkContext.setLogLevel("ERROR")
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        pass
    return session
