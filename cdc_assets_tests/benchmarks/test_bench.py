"""The side-by-side benchmark (bench.py) computes what it claims.

The end-to-end test runs the benchmark as its command line does, at a tiny size, and asserts that
cdc_assets' target equals the delta-rs MERGE's by value; no timing is asserted. It starts several
`cdc-assets run` processes and a Spark Connect server (5 minutes here on a quiet box, over 10
under load), so it runs with --long. The other tests check the harness's own parts in seconds.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import time
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from . import bench


def _ref(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=bench.SCHEMA)


ROWS = [{"id": 1, "customer": "a", "amount": Decimal("10.05"), "status": "new", "region": "asia", "seq": 0},
        {"id": 2, "customer": "b", "amount": Decimal("999999.99"), "status": "paid", "region": "europe", "seq": 3}]


def test_workloads_are_deterministic_and_shaped_as_the_issue_says():
    a, b = bench.changes(50_000, 1000, "W2", 7), bench.changes(50_000, 1000, "W2", 7)
    assert a.equals(b)
    assert not a.equals(bench.changes(50_000, 1000, "W2", 8))
    ops = dict(zip(*[c.to_pylist() for c in pc.value_counts(a["op"]).flatten()]))
    assert ops == {"I": 200, "U": 700, "D": 100}
    ids = a["id"].to_numpy()
    assert len(set(ids)) == 1000  # delta-rs refuses duplicate source keys
    old = ids[ids < 50_000]
    # the top 1% (500 ids) widens to twice the 800 updates and deletes at this small size
    assert old.min() >= 50_000 - 1600 and sorted(ids[ids >= 50_000]) == list(range(50_000, 50_200))
    w1 = bench.changes(50_000, 1000, "W1", 7)
    assert dict(zip(*[c.to_pylist() for c in pc.value_counts(w1["op"]).flatten()])) == {"I": 400, "U": 400, "D": 200}
    # an update keeps its row's region: region is a function of id
    base = bench.rows(w1["id"].to_numpy(), np.random.default_rng(0), 0)
    assert base["region"].equals(w1["region"])


def test_base_is_written_in_id_order_with_exact_decimals(tmp_path):
    f = bench.write_base(str(tmp_path / "base.parquet"), 2500, 7)
    t = pq.read_table(f)
    assert t.schema == bench.SCHEMA and t["id"].to_pylist() == list(range(2500))
    assert set(t["seq"].to_pylist()) == {0}
    cents = [int(v * 100) for v in t["amount"].to_pylist()]
    assert all(0 <= c < 100_000_000 for c in cents) and len(set(cents)) > 2000


def test_compare_accepts_a_double_that_is_the_decimal_and_reports_the_type():
    product = pa.table({**{c: _ref(ROWS)[c] for c in bench.COLUMNS}, "amount": pa.array([10.05, 999999.99]),
                        "_cdc_key": pa.array(["1", "2"])})
    c = bench.compare(product, _ref(ROWS))
    assert c["ids_equal"] and c["values_equal"] and not c["types_equal"]
    assert c["types_note"] == "amount double vs decimal(12,2)"


@pytest.mark.parametrize("change, expect", [
    ({"amount": 10.04}, "amount: 1 rows differ"),  # one cent off
    ({"amount": math.nextafter(10.05, 11)}, "amount: 1 rows differ"),  # the next double: not 10.05
    ({"status": "paid"}, "status: 1 rows differ"),
    ({"region": None}, "region: 1 rows differ"),
])
def test_compare_finds_a_value_that_differs(change, expect):
    product = _ref([dict(ROWS[0], **change), ROWS[1]] if "amount" not in change else ROWS)
    if "amount" in change:  # the product stores a double, as it does today
        product = product.set_column(2, "amount", pa.array([change["amount"], 999999.99]))
    c = bench.compare(product, _ref(ROWS))
    assert c["ids_equal"] and not c["values_equal"]
    assert expect in c["differences"]


def test_compare_finds_missing_and_extra_ids():
    c = bench.compare(_ref(ROWS[:1] + [dict(ROWS[1], id=3)]), _ref(ROWS))
    assert not c["ids_equal"] and not c["values_equal"]
    assert c["differences"] == "1 ids missing from the product, 1 extra"


def test_compare_paths_reads_a_range_of_ids_at_a_time_and_finds_a_difference_in_a_later_one(tmp_path):
    rows = [dict(ROWS[0], id=i) for i in range(10)]
    write_deltalake(str(tmp_path / "want"), _ref(rows))
    write_deltalake(str(tmp_path / "same"), _ref(rows[::-1]))
    write_deltalake(str(tmp_path / "got"), _ref(rows[:7] + [dict(rows[7], status="paid")] + rows[9:]))
    same = bench.compare_paths(str(tmp_path / "same"), str(tmp_path / "want"), step=3)
    assert same["ids_equal"] and same["values_equal"] and same["rows_product"] == 10
    c = bench.compare_paths(str(tmp_path / "got"), str(tmp_path / "want"), step=3)
    assert not c["ids_equal"] and c["rows_product"] == 9 and c["rows_reference"] == 10
    assert c["differences"] == "1 ids missing from the product, 0 extra"
    c = bench.compare_paths(str(tmp_path / "got"), str(tmp_path / "want"), step=8)  # the difference is in 0..7
    assert not c["values_equal"] and "status: 1 rows differ (id 7" in c["differences"]


def test_root_cause_names_the_java_error_not_dagsters_wrapper():
    out = ("dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op \"BENCH__base\":\n"
           "py4j.protocol.Py4JJavaError: An error occurred while calling o123.collectToPython.\n"
           ": java.lang.OutOfMemoryError: Java heap space\n"
           "BENCH: FAILED; error: dagster._core.errors.DagsterExecutionStepExecutionError: ...\n")
    assert bench.root_cause(out) == "java.lang.OutOfMemoryError: Java heap space"
    assert bench.root_cause("x\nValueError: bad thing\nBENCH: FAILED; 1s\n") == "ValueError: bad thing"


def test_delta_rs_merges_agree_and_the_pruned_one_skips_files(tmp_path):
    """The peer itself, no Spark: plain and pruned merges give the same table; on a flat
    4-file table, W2's merge rewrites only the last file, and the log-based count says so."""
    base = bench.write_base(str(tmp_path / "base.parquet"), 8000, 3)
    pf = pq.ParquetFile(base)
    table = str(tmp_path / "t")
    for start in range(0, 8000, 2000):  # four files in id order, as the 1M-row files are at scale
        write_deltalake(table, pf.read().slice(start, 2000), mode="append")
    batch = bench.changes(8000, 60, "W2", 3)
    results = {}
    for pruned in (False, True):
        copy = str(tmp_path / f"t-{pruned}")
        shutil.copytree(table, copy)
        before = bench.delta_version(copy)
        bench.deltars_merge(copy, batch, bench.merge_predicate(batch, pruned, []))
        results[pruned] = (bench.read_target(copy), bench.rewritten(copy, before))
        assert bench.holding(copy, before, batch["id"].combine_chunks()) == 1  # W2 touches the top ids only
    c = bench.compare(results[True][0], results[False][0])
    assert c["values_equal"] and c["types_equal"], c
    # delta-rs prunes the plain merge too (it bounds the target by the source's id range)
    assert results[False][1] == (1, 4) and results[True][1] == (1, 4)
    assert results[True][0].num_rows == 8000 + 12 - 6  # 20% inserts, 10% deletes


@pytest.mark.long
@pytest.mark.spark
def test_the_product_ends_equal_to_the_delta_rs_merge(tmp_path, long_run):
    if not long_run:
        pytest.skip("starts about 14 cdc-assets runs and a Spark Connect server: run with --long")
    args = bench.parse_args(["--sizes", "20000", "--w1-size", "20000", "--w1-changes", "500", "--changes", "500",
                             "--cases", "W1,W2", "--layouts", "flat,partitioned", "--work", str(tmp_path / "work"),
                             "--out", str(tmp_path / "out"), "--step-timeout", "600"])
    results = bench.run(args, echo=lambda *a, **k: print(*a, flush=True))
    product = [r for r in results if r.engine == bench.PRODUCT]
    assert len(product) == 4 and len(results) == 12
    for r in results:
        print(r)
        assert r.status == "ok", r
        if r.engine != bench.DELTA:
            assert r.ids_equal and r.values_equal, r
        assert 0 <= (r.files_rewritten or 0) <= (r.files_total or 0)
    print(bench.text_table(results))
    assert not os.path.exists(tmp_path / "out")  # run() computes; main() writes figures


def test_a_step_past_its_time_limit_is_killed_with_its_children_and_recorded(tmp_path):
    code = ("import subprocess, sys, time; print('child', subprocess.Popen(['sleep', '60']).pid, flush=True); "
            "print('still working', flush=True); time.sleep(60)")
    step = bench.run_measured([sys.executable, "-c", code], bench.child_env(), 3, str(tmp_path / "step.log"))
    assert step.status == "timeout" and not step.ok
    assert step.error.startswith("timed out after 3 s; last line: still working")
    assert step.peak_bytes > 0
    grandchild = int(step.output.split()[1])
    time.sleep(0.5)
    assert not os.path.exists(f"/proc/{grandchild}") or "Z" in open(f"/proc/{grandchild}/stat").read().split(")")[1][:3]


def test_a_failing_step_keeps_its_root_cause(tmp_path):
    code = "raise MemoryError('java.lang.OutOfMemoryError: Java heap space')"
    step = bench.run_measured([sys.executable, "-c", code], bench.child_env(), 30, str(tmp_path / "step.log"))
    assert step.status == "failed" and step.error == "java.lang.OutOfMemoryError: Java heap space"


def test_the_csv_reads_back_as_it_was_written(tmp_path):
    results = [bench.Result("W2", "flat", 1000, 10, 1, bench.PRODUCT, import_s=1.5, import_peak_mb=20, apply_cold_s=None,
                            files_rewritten=1, files_touched=1, files_total=3, ids_equal=True, values_equal=True,
                            types_equal=False, types_note="amount double vs decimal(12,2)", status="cold timeout",
                            error="cold: timed out after 5 s"),
               bench.Result("W2", "flat", 1000, 10, 1, bench.DELTA, apply_warm_s=0.25)]
    bench.write_csv(results, str(tmp_path / "bench.csv"))
    assert bench.read_csv(str(tmp_path / "bench.csv")) == results
    bench.write_plot(results, str(tmp_path / "bench_apply.png"))
    assert os.path.getsize(tmp_path / "bench_apply.png") > 0


def test_the_catch_up_case_takes_its_sizes_and_sends_every_apply_to_spark():
    args = bench.parse_args(["--cases", "catchup", "--catchup-size", "3M", "--catchup-changes", "300k"])
    (case,) = bench.plan(args)
    assert (case.workload, case.rows, case.changes) == ("catchup", 3_000_000, 300_000)
    (big,) = bench.plan(bench.parse_args(["--long", "--cases", "catchup", "--layouts", "flat"]))
    assert (big.rows, big.changes) == (50_000_000, 5_000_000)  # the issue's 5M into 50M
    env = bench.product_env(case)
    assert env["CDC_ASSETS_LOCAL_APPLY_ROWS"] == env["CDC_ASSETS_LOCAL_BUILD_ROWS"] == "0"
    assert "CDC_ASSETS_LOCAL_APPLY_ROWS" not in bench.product_env(bench.Case("W1", "flat", 10, 1))
    # W1's mix: 40% inserts, 40% updates, 20% deletes
    ops = bench.changes(1000, 100, "W1", 7)["op"].to_pylist()
    assert (ops.count("I"), ops.count("U"), ops.count("D")) == (40, 40, 20)


def test_the_feature_case_builds_each_batch_and_the_target_it_must_give(tmp_path):
    base = pq.read_table(bench.write_base(str(tmp_path / "base.parquet"), 5000, 7))
    batches = bench.feature_batches(base, 7)
    plain, n = batches[bench.PLAIN_1K]
    assert n == 1000 and plain.equals(bench.changes(5000, 1000, "W2", 7))
    # partial updates: an update carries id, region and seq only; inserts and deletes are whole
    partial, _ = batches[bench.PARTIAL_1K]
    updates = partial.filter(pc.equal(partial["op"], "U"))
    assert updates.num_rows == 700 and all(updates[c].null_count == 700 for c in bench.PARTIAL_NULLS)
    assert updates["region"].null_count == 0 and partial.filter(pc.equal(partial["op"], "I"))["customer"].null_count == 0
    expected = {r["id"]: r for r in bench.expected_target(bench.PARTIAL_1K, base, partial).to_pylist()}
    stored = {r["id"]: r for r in base.to_pylist()}
    some = updates["id"][0].as_py()
    assert expected[some]["customer"] == stored[some]["customer"] and expected[some]["seq"] > 0
    assert len(expected) == 5000 + 200 - 100
    # a truncate ranked below the 1,000 changes: only their inserts and updates are left
    truncate, n = batches[bench.TRUNCATE_1K]
    assert n == 1001 and truncate.slice(0, 1).to_pylist()[0] | {"seq": 0} == \
        {c: None for c in bench.COLUMNS} | {"seq": 0, "op": bench.TRUNCATE_OP}
    assert bench.expected_target(bench.TRUNCATE_1K, base, truncate).num_rows == 900
    # the snapshot: the whole table with 1 % of it changed, and the plain peer holds that 1 %
    pct, n = batches[bench.PLAIN_PCT]
    export, implied = batches[bench.SNAPSHOT_PCT]
    assert n == implied == 50 and export.num_rows == 5000 + 20 - 10
    assert bench.compare(export, bench.expected_target(bench.PLAIN_PCT, base, pct))["values_equal"]


def test_the_feature_case_writes_its_table_with_ratios(tmp_path):
    results = [bench.FeatureResult("F1", 100_000, bench.PLAIN_1K, 1000, seconds=10.0, tables_s=2.0, values_equal=True,
                                   status="ok"),
               bench.FeatureResult("F1", 100_000, bench.SNAPSHOT_PCT, 1000, seconds=11.0, tables_s=3.0,
                                   peer=bench.PLAIN_1K, ratio=1.5, ratio_process=1.1, values_equal=True, status="ok")]
    csv_path, md_path = bench.write_features(results, str(tmp_path), "bench --cases F1")
    text = open(md_path).read()
    assert "| 100k | snapshot 1 % changed | 1000 | 11.0 | 3.00 | - | plain 1,000 | 1.50x | 1.10x | yes | ok |" in text
    assert "ratio" in open(csv_path).readline()
