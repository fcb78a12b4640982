"""The shared conformance scenarios, run from outside through the command line (about 2 minutes)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest


@pytest.mark.spark
def test_conformance_scenarios_pass(cli, shared_dir, tmp_path):
    script = os.path.join(shared_dir, "conformance", "run_conformance.py")
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # the work folder's own instance, beside its cdc.yaml
    p = subprocess.run([sys.executable, script, "--cli", shlex.join(cli)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=3600)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    lines = p.stdout.strip().splitlines()
    assert lines, p.stderr
    assert lines[-1] == "8 passed, 0 failed", p.stdout
    assert p.returncode == 0
