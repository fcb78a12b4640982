"""The `matches_live_source` check of a table captured from a live PostgreSQL, for both capture
methods, against the throw-away cluster: it passes when the target equals the source, fails naming
how many keys differ when a target row is changed behind cdc_assets' back, and is not fooled by
changes captured, or extracted, but not applied yet (their keys are pending, left out)."""
from __future__ import annotations

import random

import dagster as dg

from cdc_assets.defs.checks import MATCHES_LIVE_SOURCE
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.names import TableNames
from cdc_assets.engine import sources
from cdc_assets_tests.support.postgres_source import (
    MARKS,
    assert_target_equals_source,
    capture,
    enabled,
    insert,
    run_ok,
    source_rows,
)

pytestmark = MARKS

SECRET = "secret-note-value"


def live_check(cfg) -> tuple[dg.AssetCheckEvaluation, dict]:
    """The check's evaluation by its own job, as the UI or a schedule launches it: (it, its metadata)."""
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(TableNames("ORDERS").live_source_job).execute_in_process(
            instance=instance, raise_on_error=False)
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.check_name == MATCHES_LIVE_SOURCE
    return evaluation, {k: v.value for k, v in evaluation.metadata.items()}


def changes(conn, rng: random.Random, base: int) -> None:
    insert(conn, base, "us", rng)
    conn.execute("UPDATE public.orders SET note = %s WHERE id = 1", (SECRET,))
    conn.execute("UPDATE public.orders SET region = 'us' WHERE id = 2")  # a key change
    conn.execute("DELETE FROM public.orders WHERE id = 3")


def base_applied(orders, rows: int, seed: int):
    """`rows` rows captured by `capture enable` and applied by a run: (cluster, database, cfg, rng)."""
    cluster, db, _ = orders
    rng = random.Random(seed)
    cfg = enabled(orders, rows, rng)
    run_ok(cfg)
    return cluster, db, cfg, rng


def test_the_check_passes_when_the_target_equals_the_source(orders_by_method):
    cluster, db, cfg, rng = base_applied(orders_by_method, 6, 41)
    with cluster.connect(db) as conn:
        changes(conn, rng, 20)
    # it reads both tables whole: a run never evaluates it (its own job does)
    assert MATCHES_LIVE_SOURCE not in run_ok(cfg).checks
    assert_target_equals_source(cluster, db, cfg)
    evaluation, figures = live_check(cfg)
    assert evaluation.passed, figures
    assert figures["rows_compared"] == len(source_rows(cluster, db)) == 6
    assert (figures["pending_keys"], figures["mismatches"]) == (0, 0)
    assert capture(cfg, "check") == 0


def test_a_target_row_changed_behind_the_tools_back_fails_the_check_naming_the_count(orders_by_method, capsys):
    from deltalake import DeltaTable

    cluster, db, cfg, _ = base_applied(orders_by_method, 6, 43)
    target = DeltaTable(f"{cfg.table_dir('ORDERS')}/target")
    target.update(predicate="id = 4", updates={"note": f"'{SECRET}'"})
    target.delete("id = 5")
    evaluation, figures = live_check(cfg)
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert (figures["differing_rows"], figures["missing_rows"], figures["extra_rows"]) == (1, 1, 0)
    assert figures["mismatches"] == 2 and figures["rows_compared"] == 6
    assert SECRET not in repr(figures)  # counts, never a value
    capsys.readouterr()
    assert capture(cfg, "check") == 1  # the command line's way to the same comparison
    out = capsys.readouterr().out
    assert "ORDERS: DIFFERS FROM the live source: 6 rows compared" in out and "2 mismatches" in out, out
    assert SECRET not in out


def test_changes_captured_or_extracted_but_not_applied_do_not_fail_the_check(orders_by_method):
    cluster, db, cfg, rng = base_applied(orders_by_method, 8, 47)
    with cluster.connect(db) as conn:
        changes(conn, rng, 20)  # keys (us, 20), (eu, 1), (eu, 2), (us, 2), (eu, 3)
    sources.extract_new_rows(cfg.table("ORDERS"), cfg.table_dir("ORDERS"))  # in the warehouse, not applied
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET qty = 1 WHERE id = 6")  # captured only
    evaluation, figures = live_check(cfg)
    assert evaluation.passed, figures
    assert figures["pending_keys"] == 6
    assert figures["rows_compared"] == len(source_rows(cluster, db)) - 4  # (us, 20), (eu, 1), (us, 2), (eu, 6) pending
    run_ok(cfg)
    evaluation, figures = live_check(cfg)
    assert evaluation.passed and figures["pending_keys"] == 0, figures
