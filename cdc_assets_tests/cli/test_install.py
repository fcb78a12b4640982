"""The package a user installs: `python -m build` makes a wheel that installs into a fresh virtual
environment beside the user's own Dagster without changing any package already there, and
`cdc-assets demo` passes in that environment."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(args: list, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "DAGSTER_HOME")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _installed(python: Path, cwd: Path) -> dict[str, str]:
    frozen = _run([BIN / "uv", "pip", "freeze", "--python", python], cwd)
    return dict(line.split("==", 1) for line in frozen.splitlines() if "==" in line)


@pytest.mark.long
def test_the_wheel_installs_beside_a_users_own_dagster_and_runs_the_demo(tmp_path, long_run):
    if not long_run:
        # each install builds PySpark's source archive anew (a minute): the normal run keeps CI short
        pytest.skip("builds the wheel and installs it with its dependencies in a new environment: run with --long")
    source = _copy_of_the_tree(tmp_path / "source")
    _run([sys.executable, "-m", "build", "--wheel", "--installer", "uv", "--outdir", tmp_path / "dist", source], source)
    [wheel] = (tmp_path / "dist").glob("cdc_assets-*.whl")
    assert not any(name.startswith("cdc_assets_tests/") for name in _wheel_names(wheel))

    venv = tmp_path / "user-venv"
    _run([BIN / "uv", "venv", "-q", "--python", sys.executable, venv], tmp_path)
    python = venv / "bin" / "python"
    dagster = importlib.metadata.version("dagster")
    # the user's own project: its Dagster, and libraries older than the ones the lock pins
    # --no-cache: each install builds PySpark's source archive anew; a cached build is 1.4 GB of disk
    _run([BIN / "uv", "pip", "install", "-q", "--no-cache", "--python", python, f"dagster=={dagster}",
          f"dagster-webserver=={dagster}", "pyyaml==6.0.2", "filelock==3.16.1"], tmp_path)
    before = _installed(python, tmp_path)
    _run([BIN / "uv", "pip", "install", "-q", "--no-cache", "--python", python, wheel], tmp_path)
    after = _installed(python, tmp_path)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert changed == {}

    out = _run([venv / "bin" / "cdc-assets", "demo", "--dir", tmp_path / "demo"], tmp_path)
    assert "demo passed" in out
    assert "user-venv/bin/cdc-assets ui --config" in out  # the UI command names this installation's program


def _copy_of_the_tree(dest: Path) -> Path:
    """The repository's files as a checkout has them (tracked, and new ones git does not ignore),
    copied: a build rewrites build/ and the egg-info in its source folder, and the egg-info in the
    repository is package metadata (entry points) for the tests running beside this one
    (pytest-xdist), whose path holds the repository."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():  # not a deleted file, nor the worktree's .venv link
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def _wheel_names(wheel: Path) -> list[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()
