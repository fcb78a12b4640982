"""The Dagster names of a table's assets, partitions, pool and jobs."""
from dataclasses import dataclass

import dagster as dg


@dataclass(frozen=True)
class TableNames:
    table: str

    @property
    def batches(self) -> str:
        return f"{self.table}__batches"

    @property
    def target_partitions(self) -> str:
        return f"{self.table}__target_partitions"

    @property
    def pool(self) -> str:
        return f"cdc_{self.table}"

    @property
    def ingest_job(self) -> str:
        return f"{self.table}_ingest_job"

    @property
    def batch_job(self) -> str:
        """A batch's one run (a target without partitions): changes, staging and, when due, target."""
        return f"{self.table}_batch_job"

    @property
    def apply_job(self) -> str:
        return f"{self.table}_apply_job"

    @property
    def base_job(self) -> str:
        return f"{self.table}_base_job"

    @property
    def freshness_job(self) -> str:
        return f"{self.table}_freshness_check_job"

    @property
    def capture_check_job(self) -> str:
        return f"{self.table}_capture_check_job"

    @property
    def live_source_job(self) -> str:
        return f"{self.table}_live_source_check_job"

    def key(self, asset: str) -> dg.AssetKey:
        return dg.AssetKey([self.table, asset])
