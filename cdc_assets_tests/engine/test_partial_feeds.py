"""Generated Debezium feeds whose updates leave columns out (TOAST placeholders; on a
`partial_updates` table also nulls and absent columns), delivered shuffled, duplicated and late
across batches, against the reference model (rules.md#rule-10): after every batch the target equals the
model's state, as do the fresh read of batches not yet merged and a rebuild from staging; the
apply on Spark executors gives the same."""
from __future__ import annotations

import pytest

from cdc_assets.core.generator import UNAVAILABLE, debezium_events, deliver, generate_history
from cdc_assets.engine import fresh, target_build
from cdc_assets_tests.reference_model import DELETE, UPSERT, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take, take_and_apply
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS

TOASTED = "customer"


def source_change(i: int, event: dict) -> SourceChange:
    """An event as the model takes it: its true position is its index in the history."""
    image = event["before"] if event["op"] == "d" else event["after"]
    unset = frozenset(c for c, v in image.items() if v == UNAVAILABLE or v == [UNAVAILABLE])
    row = {c: v for c, v in image.items() if c not in unset}
    return SourceChange((image["id"],), i + 1, DELETE if event["op"] == "d" else UPSERT, row, f"e{i}", unset)


def differences(expected: dict[tuple, dict], rows: list[dict]) -> list[str]:
    actual = {(r["id"],): r for r in rows}
    out = [f"missing {k}" for k in expected.keys() - actual.keys()]
    out += [f"unexpected {k}" for k in actual.keys() - expected.keys()]
    for k in expected.keys() & actual.keys():
        want, got = expected[k], actual[k]
        out += [f"{k} {c}: expected {want.get(c)!r}, got {got.get(c)!r}"
                for c in set(want) | set(got) if want.get(c) != got.get(c)]
    return sorted(out)


@pytest.mark.parametrize("seed, partial, on_spark", [(1, False, False), (2, True, False), (3, True, True)],
                         ids=["toast", "partial", "partial-on-spark"])
def test_generated_feed_agrees_with_the_reference(spark, workdir, monkeypatch, seed, partial, on_spark):
    if on_spark:  # every apply and build on Spark executors
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    history = generate_history(changes=300, inserts=30, updates=55, deletes=15, seed=seed, reuse_pct=40,
                               changes_per_second=5)
    events = debezium_events(history, seed=seed, toast_columns=[TOASTED], partial=partial)
    landed = deliver(list(range(len(events))), batches=5, files_per_batch=2, duplicate_pct=5, delay_pct=20,
                     seed=seed)
    table = {"name": "T", "keys": ["id"], "format": "debezium-json", "partial_updates": partial,
             "columns": {"amount": "double", "status": "string", "region": "string", TOASTED: "string"}}
    cfg = write_config(workdir, [table])
    model = ReferenceTable(partial=partial)
    flat = [sum(files, []) for files in landed]
    assert any(min(flat[n]) < max(max(b) for b in flat[:n]) for n in range(1, len(flat))), \
        "some change arrives after a newer one"
    for n, files in enumerate(landed):
        land(cfg, "T", f"b{n}", {f"f{j}.jsonl": jsonl([events[i] for i in f]) for j, f in enumerate(files)})
        # the last batch is staged only, as a run whose merge waits leaves it: the fresh read lays it over the target
        (take_and_apply if n < len(landed) - 1 else take)(spark, cfg, "T")
        for i in sum(files, []):
            model.deliver(source_change(i, events[i]))
        if n < len(landed) - 1:
            assert differences(model.state(), target_rows(cfg, "T")) == [], f"after batch {n}"
    assert differences(model.state(), fresh.fresh_table(cfg, cfg.table("T")).to_pylist()) == []
    take_and_apply(spark, cfg, "T")
    assert differences(model.state(), target_rows(cfg, "T")) == []
    target_build.rebuild(spark, cfg, cfg.table("T"), None)
    assert differences(model.state(), target_rows(cfg, "T")) == []
