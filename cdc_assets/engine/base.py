"""A source export -> `base`: the rows a table starts from, ranked below every change.

Spark tasks read the export (a Parquet export one row group per task), parse it and
write the `base` files; the driver gathers only what is small (rejections, each task's
column types, the partition list) and commits the files with delta-rs.
"""
from __future__ import annotations

import json
import os
import time

from pyspark.sql import functions as F

from ..core.changes import RECORD_FIELDS
from ..core.config import Config, TableConfig
from ..core.schema import joined
from . import delta, spark_files
from .ingest import LEDGER, parse_files, quarantine, rejected_rows
from .spark import session_of
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
    parsed = parse_files(session_of(spark), table, files, snapshot=True)
    try:
        ledgers = [json.loads(r["_cdc_row"]) for r in parsed.where(F.col("_cdc_op") == LEDGER)
                   .select("_cdc_row").collect()]
        n_rejected = quarantine(table, table_dir, rejected_rows(parsed), BASE_BATCH, log)
        good = parsed.where(F.col("_cdc_reason").isNull() & (F.col("_cdc_op") != LEDGER)) \
            .select(*[c for c, _ in RECORD_FIELDS])
        partitions = sorted(r[0] for r in good.select("_cdc_partition").distinct().collect()
                            if r[0] is not None) if table.partition_by else []
        adds = spark_files.write_files(good, base_path)
    finally:
        parsed.unpersist()
    rows = sum(json.loads(a.stats)["numRecords"] for a in adds)
    # An export's values widen the column types; a CSV export's are inferred and never misfit.
    types = joined(*ledgers)
    metrics = {"rows_read": rows + n_rejected, "rows": rows, "quarantined": n_rejected, "files": len(adds)}
    props = delta.commit_props(BASE, BASE_BATCH, {**metrics, "column_types": json.dumps(types),
                                                  "partitions": json.dumps(partitions)})
    try:
        final = spark_files.commit(base_path, None, delta.arrow_schema(RECORD_FIELDS), adds, [], (), props)
    except Exception:
        spark_files.discard(base_path, adds)
        raise
    metrics.update({"delta_version": final.version(), "seconds": round(time.time() - t0, 2)})
    return metrics
