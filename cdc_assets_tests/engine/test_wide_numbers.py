"""A number wider than any number type holds, in a column typed by its values, goes to quarantine
naming its file, line and column; the rest of the batch applies and the table's run succeeds."""
from __future__ import annotations

import json
from decimal import Decimal

from deltalake import DeltaTable

from cdc_assets.cli.main import main
from cdc_assets_tests.core.test_value_bounds import LARGEST, connect_decimal_event


def test_a_debezium_decimal_of_40_digits_is_quarantined_and_its_batch_applies(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "cdc.yaml").write_text("warehouse: ./warehouse\nlanding: ./landing\ntables:\n"
                                       "  - name: T\n    keys: [id]\n    format: debezium-json\n")
    batch = tmp_path / "landing" / "T" / "b1"
    batch.mkdir(parents=True)
    events = [connect_decimal_event(i, v, None) for i, v in enumerate([LARGEST, 10 ** 39, 5], start=1)]
    (batch / "p.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--config", "cdc.yaml"]) == 0  # before: the target step failed, exit 1
    target = DeltaTable(str(tmp_path / "warehouse" / "T" / "target")).to_pyarrow_table()
    assert sorted(target.select(["id", "v"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": Decimal(LARGEST)}, {"id": 3, "v": Decimal(5)}]
    [reject] = DeltaTable(str(tmp_path / "warehouse" / "T" / "quarantine")).to_pyarrow_table().to_pylist()
    assert reject["_cdc_line"] == 2 and reject["_cdc_reason"].startswith("column 'v': ")
    assert "a number of 40 digits, more than any number type holds (38 digits)" in reject["_cdc_reason"]
    assert str(10 ** 39) not in capsys.readouterr().err  # the value stays in the quarantine table
