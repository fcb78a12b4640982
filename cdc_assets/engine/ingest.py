"""Batch -> `changes` (+ `quarantine`): parse in Spark workers, drop re-deliveries."""
from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa

from ..core import ordering
from ..core.changes import RECORD_FIELDS, REJECT_FIELDS, Change, to_record, to_reject
from ..core.config import Config, TableConfig
from ..core.formats import parse_file, parse_snapshot
from . import delta, faults
from .landing import Batch, is_done_or_next
from .tables import CHANGES, QUARANTINE, QUARANTINE_FIELDS, path

PARSED_FIELDS = RECORD_FIELDS + (("_cdc_reason", "string"), ("_cdc_raw", "string"))


def _parse_partition(table: TableConfig, snapshot: bool):
    """The function Spark runs on each slice of the file list: files -> records or rejections."""
    schema = delta.arrow_schema(PARSED_FIELDS)
    keys, partition_by = list(table.keys), list(table.partition_by)
    tier = ordering.BASE_TIER if snapshot else ordering.CHANGE_TIER

    def items(name, data):
        return parse_snapshot(keys, name, data) if snapshot else parse_file(table.format, table.options, keys, name, data)

    def run(batches):
        for files in batches:
            for f in files.to_pylist():
                with open(f["path"], "rb") as fh:
                    data = fh.read()
                out = []
                for item in items(f["file"], data):
                    if isinstance(item, Change):
                        rec = to_record(item, batch_seq=f["batch_seq"], batch_id=f["batch_id"], file_name=f["file"],
                                        file_index=f["file_index"], partition_by=partition_by, tier=tier)
                        rec["_cdc_reason"] = rec["_cdc_raw"] = None
                    else:
                        rec = dict.fromkeys(n for n, _ in RECORD_FIELDS)
                        rec.update(to_reject(item, batch_seq=f["batch_seq"], batch_id=f["batch_id"], file_name=f["file"]))
                    out.append(rec)
                    if len(out) >= 5000:
                        yield pa.RecordBatch.from_pylist(out, schema=schema)
                        out = []
                if out:
                    yield pa.RecordBatch.from_pylist(out, schema=schema)
    return run


def parse_files(spark, table: TableConfig, files: list[dict], snapshot: bool = False):
    """A cached DataFrame of parsed records; rows with `_cdc_reason` set are rejections."""
    listing = spark.createDataFrame(files, "path string, file string, file_index int, batch_seq long, batch_id string")
    return listing.repartition(max(1, min(len(files), 8))).mapInArrow(
        _parse_partition(table, snapshot), delta.spark_schema(PARSED_FIELDS)).cache()


def quarantine(table: TableConfig, table_dir: str, rejected, batch_seq: int, log=None) -> int:
    """Commit a step's rejected records to `quarantine` unless an earlier attempt did."""
    from pyspark.sql import functions as F

    n = rejected.count()
    if n and delta.step_version(path(table_dir, QUARANTINE), QUARANTINE) < batch_seq:
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        q = rejected.select(F.lit(table.name).alias("table"), *[c for c, _ in REJECT_FIELDS],
                            F.lit(now).alias("quarantined_at")).toArrow()
        delta.append(path(table_dir, QUARANTINE), q.cast(delta.arrow_schema(QUARANTINE_FIELDS)), QUARANTINE, batch_seq)
        if log:
            for r in q.slice(0, 20).to_pylist():
                log(f"table {table.name}: file {r['_cdc_file']} line {r['_cdc_line']}: {r['_cdc_reason']}")
    return n


def ingest_batch(spark, cfg: Config, table: TableConfig, batch: Batch, log=None) -> dict:
    """Commit the batch's distinct changes and its rejected records; a second call does nothing."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    changes_path = path(table_dir, CHANGES)
    if is_done_or_next(table.name, changes_path, CHANGES, batch):
        return {"already_committed": True}
    landing = cfg.landing_dir(table.name)
    files = [{"path": os.path.join(landing, f), "file": f, "file_index": i, "batch_seq": batch.seq,
              "batch_id": batch.id} for i, f in enumerate(batch.files)]
    parsed = parse_files(spark, table, files)
    try:
        good = parsed.where(F.col("_cdc_reason").isNull())
        records_read = parsed.count()
        faults.point("changes.parsed")
        n_rejected = quarantine(table, table_dir, parsed.where(F.col("_cdc_reason").isNotNull()), batch.seq, log)
        # At-least-once delivery: an event id seen in this batch or any earlier one counts once.
        first = Window.partitionBy("_cdc_event_id").orderBy(F.col("_cdc_order"))
        with_id = good.where(F.col("_cdc_event_id").isNotNull()).withColumn("_n", F.row_number().over(first)) \
            .where("_n = 1").drop("_n")
        earlier = delta.spark_frame(spark, changes_path, RECORD_FIELDS).select("_cdc_event_id") \
            .where(F.col("_cdc_event_id").isNotNull())
        distinct = with_id.join(earlier, "_cdc_event_id", "left_anti") \
            .unionByName(good.where(F.col("_cdc_event_id").isNull())) \
            .select(*[n for n, _ in RECORD_FIELDS])
        new = distinct.toArrow().cast(delta.arrow_schema(RECORD_FIELDS))
        n_good = records_read - n_rejected
        metrics = {
            "files": len(files), "records_read": records_read, "changes_new": new.num_rows,
            "duplicates_skipped": n_good - new.num_rows, "quarantined": n_rejected,
        }
        version = delta.append(changes_path, new, CHANGES, batch.seq, metrics)
        metrics["compacted"] = delta.compact_if_fragmented(changes_path)
    finally:
        parsed.unpersist()
    metrics.update({"delta_version": version, "seconds": round(time.time() - t0, 2)})
    return metrics
