"""Resources: one lazily started Spark session per run.

The session is chosen when a step first needs it (engine/spark.py): an explicit Spark
Connect address, else the configuration's Spark Connect server when it answers, else an
in-process session. The run's log says which, and says why when a server was passed over.
"""
from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from ..core.config import Config, load_config
from ..engine.gcs import is_gcs
from ..engine.spark import choose_session
from .pools import mark_process


class CdcSparkResource(dg.ConfigurableResource):
    """The run's Spark session, started when a step first asks for it (`spark_session`). It is
    dagster-pyspark's LazyPySparkResource without its import of PySpark, which costs every run's
    process a few tenths of a second while a small batch never needs Spark."""

    spark_config: dict[str, Any]
    # cdc.yaml's path: it locates the configuration's Spark Connect server record.
    config_path: str | None = None
    _spark_session: Any = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._log = context.log
        if context.instance is not None and context.dagster_run is not None:
            # The process executing the run (the UI's or the sensor's run worker, or `cdc-assets
            # run`), so that a later run can tell it died holding the table's pool (pools.py).
            mark_process(context.instance, context.dagster_run.run_id)

    @property
    def spark_session(self) -> Any:
        if self._spark_session is None:
            cfg = load_config(self.config_path) if self.config_path else None
            choice = choose_session(self.spark_config, cfg)
            if self._log is not None:
                if choice.warning:
                    self._log.warning(choice.warning)
                self._log.info(f"Spark: {choice.description}")
            self._spark_session = choice.session
        return self._spark_session


def spark_resource(cfg: Config) -> CdcSparkResource:
    # Lazy: sensors and checks that only read Delta never pay Spark's start-up.
    return CdcSparkResource(spark_config=dict(cfg.spark), config_path=cfg.path)


def table_resources(cfg: Config) -> dict:
    """The resources of every table's assets; a Google Cloud one only where the configuration uses
    it, since importing dagster_gcp costs about a second in every run."""
    out: dict = {"pyspark": spark_resource(cfg)}
    if is_gcs(cfg.landing):
        from .gcp_resources import GCSResource

        # the landing area's client: application default credentials, a service-account file
        # (GOOGLE_APPLICATION_CREDENTIALS) or the emulator (STORAGE_EMULATOR_HOST)
        out["gcs"] = GCSResource()
    if any(t.reads_bigquery or t.publish for t in cfg.tables):
        from .gcp_resources import CdcBigQueryResource

        # the BigQuery client of tables read from or published to BigQuery: application default
        # credentials, or the emulator (BIGQUERY_EMULATOR_HOST)
        out["bigquery"] = CdcBigQueryResource()
    return out


def spark_session(resource: CdcSparkResource):
    session = resource.spark_session
    try:
        session.sparkContext.setLogLevel("ERROR")
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        pass
    return session
