"""Whether rows are in strictly ascending key order: a proof, without hashing or counting, that
no key is in them twice.

A table's rows in strictly ascending order of its key columns hold each key once; files each
strictly ascending, whose key spans do not overlap, hold each key once between them. An export
written in key order (the usual case) is proven free of duplicates this way in one pass over its
key columns, file by file, where counting distinct keys would hash every key of the table at
once. Where the proof fails (rows out of order, an equal neighbour, a NaN or a null in a key,
a key type Arrow cannot compare) the answer is only "not proven": the caller counts instead.

Strict order of the typed key values implies distinct key texts: the text of a key
(core/values.key_texts) is a function of its typed values, and a value that compares equal to
another under a different text (-0.0 and 0.0) is an equal neighbour, so not proven.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc


def pairs_ascending(before: pa.Table, after: pa.Table, keys: Sequence[str]) -> bool:
    """Whether each row of `before` ranks strictly below the row of `after` at the same position,
    comparing the key columns in order (the first that differs decides)."""
    if before.num_rows != after.num_rows:
        raise ValueError("pairs_ascending compares tables of the same length")
    if before.num_rows == 0:
        return True
    less = pa.scalar(False)
    equal = pa.scalar(True)
    try:
        for k in keys:
            a, b = before.column(k), after.column(k)
            less = pc.or_(less, pc.and_(equal, pc.less(a, b)))
            equal = pc.and_(equal, pc.equal(a, b))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False  # a key type without an order here: not proven
    if isinstance(less, pa.Scalar):
        return bool(less.as_py())
    return bool(pc.all(pc.fill_null(less, False)).as_py())


def ascending(rows: pa.Table, keys: Sequence[str]) -> bool:
    """Whether `rows` are in strictly ascending key order (so each key is in them once)."""
    n = rows.num_rows
    if n < 2:
        return all(rows.column(k).null_count == 0 for k in keys)
    if any(rows.column(k).null_count for k in keys):
        return False
    part = rows.select(list(keys))
    return pairs_ascending(part.slice(0, n - 1), part.slice(1, n - 1), keys)


def spans_disjoint(firsts: pa.Table, lasts: pa.Table, keys: Sequence[str]) -> bool:
    """Whether spans of keys (row i of `firsts` to row i of `lasts`, each of a strictly ascending
    file) are disjoint: sorted by their first keys, each span ends strictly below the next begins."""
    n = firsts.num_rows
    if n < 2:
        return True
    try:
        order = pc.sort_indices(firsts, [(k, "ascending") for k in keys])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    firsts, lasts = firsts.take(order).select(list(keys)), lasts.take(order).select(list(keys))
    return pairs_ascending(lasts.slice(0, n - 1), firsts.slice(1, n - 1), keys)
