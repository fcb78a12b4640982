"""Truncates (rules.md#rule-9) and soft deletes (rules.md#rule-12) against the reference model: random source
histories of a few keys with inserts, updates, deletes (some carrying only the key) and
truncates, as Debezium events, on tables with and without partial updates (rules.md#rule-10: an update
then carries only some columns), delivered shuffled across batches (some delayed into later
batches, some twice), applied run by run and compared after every batch with `ReferenceTable`
fed the same deliveries; then a rebuild from staging must give the same rows."""
from __future__ import annotations

import random

import pytest

from cdc_assets.core.generator import deliver
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.reference_model import DELETE, TRUNCATE, UPSERT, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows

from .test_debezium_feed import lines

pytestmark = MARKS

TS = 1_709_287_200_000


def history(rng: random.Random, n: int, partial: bool = False) -> list[tuple[SourceChange, dict]]:
    """A source history in true order: each change and its Debezium event. A delete's image is
    the deleted row or (a table without REPLICA IDENTITY FULL) only the key; on a `partial` table
    an update carries only some columns (the others absent or null), and an insert may hold nulls."""
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
            row = state.pop(k) if rng.random() < 0.5 else {"id": k}
            state.pop(k, None)
            out.append((SourceChange((k,), seq, DELETE, row, str(seq)),
                        {"op": "d", "before": row, "after": None, "source": source, "ts_ms": TS}))
            continue
        row = {"id": k, "v": f"v{seq}", "w": f"w{seq}"}
        if partial and k in state:
            row = {c: v for c, v in row.items() if c == "id" or rng.random() < 0.5}
            row.update({c: None for c in ("v", "w") if c not in row and rng.random() < 0.5})
        elif partial:  # a new row may hold nulls: after a delete or truncate they stay null
            row.update({c: None for c in ("v", "w") if rng.random() < 0.3})
        op = "u" if k in state else "c"
        state[k] = {**state.get(k, {}), **{c: v for c, v in row.items() if v is not None}}
        out.append((SourceChange((k,), seq, UPSERT, row, str(seq)),
                    {"op": op, "before": None, "after": row, "source": source, "ts_ms": TS}))
    return out


@pytest.mark.parametrize("soft,partial,on_spark", [(False, False, False), (True, False, False),
                                                  (True, False, True), (False, True, False), (True, True, False)],
                         ids=["hard", "soft", "soft-on-spark", "hard-partial", "soft-partial"])
@pytest.mark.parametrize("seed", [1, 2])
def test_truncates_and_soft_deletes_agree_with_the_reference_model(spark, tmp_path, monkeypatch, soft, partial,
                                                                     on_spark, seed):
    if on_spark:
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    (tmp_path / "landing").mkdir()
    cfg = write_config(tmp_path, [{"name": "M", "keys": ["id"], "format": "debezium-json",
                                   "columns": {"v": "string", "w": "string"}, "partial_updates": partial,
                                   **({"deletes": "soft"} if soft else {})}])
    rng = random.Random(f"truncates:{seed}")
    changes = history(rng, 60, partial)
    landed = deliver(list(range(len(changes))), batches=4, files_per_batch=2, duplicate_pct=5, delay_pct=20,
                     seed=seed)
    model = ReferenceTable(partial=partial)
    for n, files in enumerate(landed, start=1):
        for f in files:
            for i in f:
                model.deliver(changes[i][0])
        land(cfg, "M", f"batch-{n}", {f"p{j}.jsonl": lines(*[changes[i][1] for i in f]) for j, f in enumerate(files)})
        take_and_apply(spark, cfg, "M")
        assert _rows(cfg, soft) == _expected(model, soft), (seed, n)
    rebuild(spark, cfg, cfg.table("M"), None)
    assert _rows(cfg, soft) == _expected(model, soft)


def _rows(cfg, soft: bool) -> dict:
    rows = target_rows(cfg, "M", source_only=False)
    if soft:
        return {r["id"]: (r["v"], r["w"], r["_cdc_deleted"]) for r in rows}
    return {r["id"]: (r["v"], r["w"]) for r in rows}


def _expected(model: ReferenceTable, soft: bool) -> dict:
    if soft:
        return {k[0]: (row.get("v"), row.get("w"), deleted) for k, (row, deleted) in model.soft_state().items()}
    return {k[0]: (row.get("v"), row.get("w")) for k, row in model.state().items()}
