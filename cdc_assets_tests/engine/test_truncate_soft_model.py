"""Truncates (rule 9) and soft deletes (rule 12) against the reference model: random source
histories of a few keys with inserts, updates, deletes and truncates, as Debezium events,
delivered shuffled across batches (some delayed into later batches, some twice), applied run by
run and compared after every batch with `ReferenceTable` fed the same deliveries; then a
rebuild from staging must give the same rows."""
from __future__ import annotations

import random

import pytest

from cdc_assets.core.generator import deliver
from cdc_assets.engine import spark_apply, spark_files
from cdc_assets.engine.apply import rebuild
from cdc_assets_tests.helpers import land, target_rows, write_config
from cdc_assets_tests.reference_model import DELETE, TRUNCATE, UPSERT, ReferenceTable, SourceChange

from .records import MARKS, run_ok
from .test_debezium_feed import lines

pytestmark = MARKS

TS = 1_709_287_200_000


def history(rng: random.Random, n: int) -> list[tuple[SourceChange, dict]]:
    """A source history in true order: each change and its Debezium event."""
    state: dict[int, dict] = {}
    out = []
    for seq in range(1, n + 1):
        r = rng.random()
        source = {"connector": "postgresql", "ts_ms": TS + seq // 3 * 1000, "lsn": 1000 + 10 * seq, "db": "d",
                  "table": "t"}
        if r < 0.06:
            state.clear()
            out.append((SourceChange((), seq, TRUNCATE, {}, str(seq)),
                        {"op": "t", "before": None, "after": None, "source": source, "ts_ms": TS}))
            continue
        k = rng.randrange(1, 9)
        if k in state and r < 0.3:
            row = state.pop(k)
            out.append((SourceChange((k,), seq, DELETE, row, str(seq)),
                        {"op": "d", "before": row, "after": None, "source": source, "ts_ms": TS}))
            continue
        row = {"id": k, "v": f"v{seq}"}
        op = "u" if k in state else "c"
        state[k] = row
        out.append((SourceChange((k,), seq, UPSERT, row, str(seq)),
                    {"op": op, "before": None, "after": row, "source": source, "ts_ms": TS}))
    return out


@pytest.mark.parametrize("soft,on_spark", [(False, False), (True, False), (True, True)],
                         ids=["hard", "soft", "soft-on-spark"])
@pytest.mark.parametrize("seed", [1, 2])
def test_truncates_and_soft_deletes_agree_with_the_reference_model(spark, tmp_path, monkeypatch, soft, on_spark,
                                                                     seed):
    if on_spark:
        monkeypatch.setattr(spark_apply, "LOCAL_ROWS", 0)
        monkeypatch.setattr(spark_files, "LOCAL_ROWS", 0)
    (tmp_path / "landing").mkdir()
    cfg = write_config(tmp_path, [{"name": "M", "keys": ["id"], "format": "debezium-json",
                                   **({"deletes": "soft"} if soft else {})}])
    rng = random.Random(f"truncates:{seed}")
    changes = history(rng, 60)
    landed = deliver(list(range(len(changes))), batches=4, files_per_batch=2, duplicate_pct=5, delay_pct=20,
                     seed=seed)
    model = ReferenceTable()
    for n, files in enumerate(landed, start=1):
        for f in files:
            for i in f:
                model.deliver(changes[i][0])
        land(cfg, "M", f"batch-{n}", {f"p{j}.jsonl": lines(*[changes[i][1] for i in f]) for j, f in enumerate(files)})
        run_ok(cfg, "M")
        assert _rows(cfg, soft) == _expected(model, soft), (seed, n)
    rebuild(spark, cfg, cfg.table("M"), None)
    assert _rows(cfg, soft) == _expected(model, soft)


def _rows(cfg, soft: bool) -> dict:
    rows = target_rows(cfg, "M", source_only=False)
    if soft:
        return {r["id"]: (r["v"], r["_cdc_deleted"]) for r in rows}
    return {r["id"]: r["v"] for r in rows}


def _expected(model: ReferenceTable, soft: bool) -> dict:
    if soft:
        return {k[0]: (row["v"], deleted) for k, (row, deleted) in model.soft_state().items()}
    return {k[0]: row["v"] for k, row in model.state().items()}
