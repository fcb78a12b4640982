"""Each key's latest change: in the driver with Arrow, or on Spark executors."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def latest_per_key(frame):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("_cdc_key").orderBy(F.col("_cdc_order").desc())
    return frame.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


def first_of_each(rows: pa.Table, column: str, order: str = "descending") -> pa.Table:
    """Per value of `column`, the row that comes first by ordering key in `order` (in the driver)."""
    if rows.num_rows == 0:
        return rows
    ordered = rows.sort_by([(column, "ascending"), ("_cdc_order", order)])
    values = ordered[column]
    first = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1))
    return ordered.filter(pa.concat_arrays([pa.array([True]), first.combine_chunks()]))


def latest_of_batch(changes: pa.Table) -> pa.Table:
    """Per key, the change with the greatest ordering key (a batch's worth, in the driver)."""
    return first_of_each(changes, "_cdc_key")
