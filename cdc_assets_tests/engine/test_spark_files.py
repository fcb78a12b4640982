"""Files written outside delta-rs (by Spark's executors) and committed by delta-rs keep statistics
that let delta-rs find every key in them: a lookup by key never skips the file that holds it."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_assets.engine import delta, spark_files
from cdc_assets.engine.table_layout import TOMBSTONE_FIELDS


def test_keys_outside_the_basic_multilingual_plane_are_found_by_their_statistics(tmp_path):
    # A random feed lost a tombstone this way: the key's file statistics said '\U00098bf4' where the
    # key holds '\U000a8bf4', delta-rs skipped the file, and a stale upsert brought the key back.
    table = str(tmp_path / "tombstones")
    keys = ['["f","a"]', '["f","\u00e9"]', '["f","\U0001f600 smile"]', '["f","\U000a8bf4"]']  # the last is the file's greatest
    os.makedirs(os.path.join(table, "spark-x"))
    data = pa.table({"_cdc_key": sorted(keys), "_cdc_order": ["1", "2", "3", "4"]})
    pq.write_table(data, os.path.join(table, "spark-x", "part-0.parquet"))
    add = spark_files.add_action(table, os.path.join(table, "spark-x", "part-0.parquet"), data.schema)
    spark_files.commit(table, None, data.schema, [add], [], (), delta.commit_props("tombstones", 1))
    for key in keys:
        found = delta.rows_with_keys(table, TOMBSTONE_FIELDS, [key])
        assert found["_cdc_key"].to_pylist() == [key]
