"""A source export -> `base`: the rows a table starts from, ranked below every change."""
from __future__ import annotations

import json
import os
import time

from pyspark.sql import functions as F

from ..core.changes import RECORD_FIELDS
from ..core.config import Config, TableConfig
from . import delta
from .ingest import TYPED_FIELDS, admit_rows, parse_files, quarantine, rejected_rows
from .tables import BASE, path

BASE_BATCH = 0  # base rows count as batch 0; landed batches start at 1


def import_base(spark, cfg: Config, table: TableConfig, log=None) -> dict:
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    base_path = path(table_dir, BASE)
    if delta.step_version(base_path, BASE) >= BASE_BATCH:
        return {"already_committed": True}
    files = [{"path": table.base_snapshot, "file": os.path.basename(table.base_snapshot), "file_index": 0,
              "batch_seq": BASE_BATCH, "batch_id": "base"}]
    parsed = parse_files(spark, table, files, snapshot=True)
    try:
        n_read = parsed.count()
        n_rejected = quarantine(table, table_dir, rejected_rows(parsed), BASE_BATCH, log)
        good = parsed.where(F.col("_cdc_reason").isNull()).select(*[c for c, _ in TYPED_FIELDS]).toArrow()
    finally:
        parsed.unpersist()
    # An export's values widen the column types; a CSV export's are inferred and never misfit.
    types: dict = {}
    admit_rows(types, good, lambda _file: True)
    good = good.select([c for c, _ in RECORD_FIELDS])
    metrics = {"rows_read": n_read, "rows": good.num_rows, "quarantined": n_rejected}
    version = delta.append(base_path, good.cast(delta.arrow_schema(RECORD_FIELDS)), BASE, BASE_BATCH,
                           {**metrics, "column_types": json.dumps(types)})
    metrics.update({"delta_version": version, "seconds": round(time.time() - t0, 2)})
    return metrics
