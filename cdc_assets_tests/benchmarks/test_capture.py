import json

from cdc_assets_tests.benchmarks import capture


def test_the_capture_benchmark_measures_both_methods_and_their_targets_equal_the_source(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the benchmark's runs use their configuration's own instance
    out = tmp_path / "figures"
    assert capture.main(["--changes", "200", "--rows", "100", "--per-transaction", "20", "--out", str(out),
                         "--note", "test"]) == 0
    summary = json.loads((out / "capture.json").read_text())
    assert summary["note"] == "test"
    assert [r["method"] for r in summary["results"]] == ["changelog", "logical"]
    for r in summary["results"]:
        assert r["target_matches_source"] is True and r["rows_compared"] > 0
        assert r["captured_changes"] == 200  # no key changes here: one change per statement
        assert r["dml_seconds_without_capture"] > 0 and r["dml_ratio"] > 0
    assert "| changelog | 200 |" in (out / "capture.md").read_text()
