"""Staged records combined column by column where a key's latest change alone is not its state
(core/partial.py): a `partial_updates` table's key with more than one change, a key with a
change that does not carry a column (a TOAST placeholder), and a soft-delete table's key with a
delete and another change (the delete keeps the key's last live row). Every other key keeps its
latest change, so a table whose changes carry full rows pays nothing for this. The table's
truncates (`cuts`) end every key's row as a delete does.

A combined key is one record: the latest change's, its row image holding the combined values
(its typed columns null), its `_cdc_partition` that of those values. Staging keeps every change
of such a key (`staged`), since a change arriving later must be combined with each of them.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..core.changes import DELETE, RECORD_FIELDS, TRUNCATE, TRUNCATE_KEY, UPSERT
from ..core.config import TableConfig
from ..core.partial import Piece, combine
from ..core.values import UNSET_KEY, decode_image, encode_row, key_text
from . import delta
from .latest import latest_of_batch, latest_per_key
from .table_layout import STAGING, path

__all__ = ["UNSET_KEY", "combines", "marked", "combined_record", "latest_or_combined", "staged",
           "spark_latest_or_combined", "LEFT_OUT", "lists_unset", "left_out_through", "leaves_columns_out"]

_MARK = '"' + UNSET_KEY + '"'


def combines(table: TableConfig) -> bool:
    """Whether a table's changes can leave columns out: partial updates, a Debezium feed or a
    PostgreSQL slot (TOAST), or soft deletes (a delete's image may carry the key alone)."""
    return table.partial_updates or table.spec.leaves_columns_out or table.capture == "logical" \
        or table.soft_deletes


# What each staging commit records (cdc.leaves_columns_out): whether a change staged in its batch or
# an earlier one lists columns it does not carry, so that asking follows the batches, not staging's rows.
LEFT_OUT = "leaves_columns_out"


def lists_unset(rows: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a row image among `rows` may list columns its change does not carry."""
    return bool(pc.any(pc.fill_null(pc.match_substring(rows, UNSET_KEY), False)).as_py())


def left_out_through(table_dir: str, seq: int, listed_here: bool) -> dict[str, str]:
    """The staging commit of batch `seq` records whether it (`listed_here`) or an earlier batch
    staged a change that lists columns it does not carry."""
    return {LEFT_OUT: "true" if listed_here or leaves_columns_out(table_dir, seq - 1) else "false"}


def leaves_columns_out(table_dir: str, reached: int) -> bool:
    """Whether a staged change up to batch `reached` may leave a column out (its image lists some):
    as the staging commit of that batch records it, or, for a batch staged before commits recorded
    it, from a scan of staging's row images (once: the next batch's commit records the answer)."""
    staging = path(table_dir, STAGING)
    recorded = delta.step_commit(staging, STAGING, reached)
    if recorded is not None and LEFT_OUT in recorded:
        return recorded[LEFT_OUT] == "true"
    found = delta.query(staging, "SELECT count(*) AS n FROM t WHERE _cdc_batch_seq <= "
                                 f"{int(reached)} AND _cdc_row LIKE '%{UNSET_KEY}%'")
    return found is not None and found.num_rows > 0 and int(found["n"][0].as_py() or 0) > 0


def cut_orders(records: pa.Table) -> list[str]:
    """The ordering keys of the truncates among `records`: each ends every key's row (rules.md#rule-9)."""
    return records.filter(pc.equal(records["_cdc_op"], TRUNCATE))["_cdc_order"].to_pylist()


def marked(rows: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Which row images list columns their change does not carry."""
    hits = pc.fill_null(pc.match_substring(rows, _MARK), False)
    if not pc.any(hits).as_py():
        return hits.combine_chunks() if isinstance(hits, pa.ChunkedArray) else hits
    texts = rows.to_pylist()
    return pa.array([bool(h) and bool(decode_image(texts[i])[1]) for i, h in enumerate(hits.to_pylist())],
                    pa.bool_())


def _combined_keys(records: pa.Table, partial: bool, soft: bool = False) -> pa.Array:
    """The keys of `records` whose latest change alone is not their state, and the truncates'
    pseudo-key (every truncate is kept: each is a cut for the keys it ranks between)."""
    counted = pa.table({"k": records["_cdc_key"], "m": marked(records["_cdc_row"]),
                        "d": pc.equal(records["_cdc_op"], DELETE)}) \
        .group_by("k").aggregate([("m", "any"), ("d", "any"), ("k", "count")])
    need = pc.greater(counted["k_count"], 1)
    if not partial:
        why = pc.or_(counted["m_any"], pc.equal(counted["k"], TRUNCATE_KEY))
        need = pc.and_(need, pc.or_(why, counted["d_any"]) if soft else why)
    return counted.filter(need)["k"].combine_chunks()


def piece(record: dict) -> Piece:
    """A record as the combination reads it: its row image, or its typed columns."""
    if record["_cdc_row"] is not None:
        row, unset = decode_image(record["_cdc_row"])
    else:
        row, unset = {c: v for c, v in record.items() if not c.startswith("_cdc_")}, frozenset()
    return Piece(record["_cdc_order"], record["_cdc_op"], row, unset)


def combined_record(records: list[dict], partial: bool, partition_by, soft: bool = False, cuts=()) -> dict:
    """The key's state after `records` (one key's) as one record: the latest's, its image the key's
    values (in a soft-delete table a delete's too: the row it keeps)."""
    done = combine([piece(r) for r in records], partial, soft=soft, cuts=cuts)
    latest = records[done.latest]
    out = {n: latest.get(n) for n, _ in RECORD_FIELDS}
    if latest["_cdc_op"] == UPSERT or (soft and latest["_cdc_op"] == DELETE):
        out["_cdc_row"] = encode_row(done.row)
        if partition_by:
            out["_cdc_partition"] = key_text([done.row.get(c) for c in partition_by])
    return out


def combine_keys(records: pa.Table, partial: bool, partition_by, soft: bool = False, cuts=()) -> pa.Table:
    """One record per key of `records`: its latest change, holding the key's combined values."""
    by_key: dict[str, list[dict]] = {}
    for r in records.to_pylist():
        by_key.setdefault(r["_cdc_key"], []).append(r)
    rows = [combined_record(group, partial, partition_by, soft, cuts) for group in by_key.values()]
    return pa.Table.from_pylist(rows, schema=records.schema)


def latest_or_combined(records: pa.Table, partial: bool, partition_by, soft: bool = False) -> pa.Table:
    """Per key, its latest change, or its combined record where the latest alone is not its state
    (`records`: a whole history, its truncates included)."""
    need = _combined_keys(records, partial, soft)
    if len(need) == 0:
        return latest_of_batch(records)
    chosen = pc.is_in(records["_cdc_key"], value_set=need)
    return pa.concat_tables([latest_of_batch(records.filter(pc.invert(chosen))),
                             combine_keys(records.filter(chosen), partial, partition_by, soft, cut_orders(records))])


def staged(changes: pa.Table, table: TableConfig) -> pa.Table:
    """What staging keeps of a batch's changes: each key's latest, or every change of a key whose
    latest alone is not its state (a change of another batch may rank between them)."""
    if not combines(table):
        return latest_of_batch(changes)
    need = _combined_keys(changes, table.partial_updates, table.soft_deletes)
    if len(need) == 0:
        return latest_of_batch(changes)
    chosen = pc.is_in(changes["_cdc_key"], value_set=need)
    return pa.concat_tables([latest_of_batch(changes.filter(pc.invert(chosen))), changes.filter(chosen)])


def spark_latest_or_combined(history, partial: bool, partition_by, soft: bool = False, cuts=()):
    """`latest_or_combined` on Spark executors: a key's records meet in one task only where they
    are combined; the others take the window that picks each key's latest. `cuts`: the history's
    truncates' ordering keys."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("_cdc_key")
    flagged = history.withColumn("_cdc_n", F.count(F.lit(1)).over(w)) \
        .withColumn("_cdc_m", F.max(F.coalesce(F.col("_cdc_row").contains(_MARK), F.lit(False)).cast("int")).over(w)) \
        .withColumn("_cdc_d", F.max((F.col("_cdc_op") == DELETE).cast("int")).over(w))
    need = (F.col("_cdc_n") > 1) & (F.lit(partial) | (F.col("_cdc_m") == 1) | (F.lit(soft) & (F.col("_cdc_d") == 1)))
    helpers = ["_cdc_n", "_cdc_m", "_cdc_d"]
    simple = latest_per_key(flagged.where(~need).drop(*helpers))
    schema = history.schema
    cuts = list(cuts)
    combined = flagged.where(need).drop(*helpers).groupBy("_cdc_key").applyInArrow(
        lambda rows: combine_keys(rows, partial, list(partition_by), soft, cuts), schema)
    return simple.unionByName(combined)
