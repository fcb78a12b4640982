"""`cdc-assets demo`, run as a user runs it: the demo feed lands batch by batch, each run applies
it, and every table's landed files and target reconcile with the generated source export."""
from __future__ import annotations

import subprocess


def test_the_demo_applies_every_batch_and_reconciles_every_table(cli, tmp_path):
    p = subprocess.run(cli + ["demo", "--dir", str(tmp_path / "demo")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    results = [line for line in lines if line.endswith(("-> OK", "-> DISCREPANCIES"))]
    assert [r.split(":")[0] for r in results] == ["ORDERS", "CUSTOMERS", "PAYMENTS"]
    for r in results:
        assert r.endswith("-> OK") and "0 missing, 0 extra, 0 differing" in r, r
    assert any(line.startswith("demo passed") for line in lines)
