"""Shared fixtures: one real Spark session for the whole test run (start-up costs 15-35 s here)."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from cdc_assets_tests.figures import Figures, from_request

pytest_plugins = ["cdc_assets_tests.emulators",  # the Google Cloud emulators' fixtures
                  "cdc_assets_tests.postgres"]  # a throw-away PostgreSQL cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long settings (more generated feeds, longer soak)")
    parser.addoption("--figures", default=None, metavar="DIR",
                     help="write the measured figures the README quotes into DIR (e.g. docs/figures); "
                          "without it (or CDC_ASSETS_FIGURES) tests write no figure files")
    parser.addoption("--figures-force-dirty", action="store_true", default=False,
                     help="write figures into docs/figures even from a tree with uncommitted changes "
                          "(the files then say dirty: true)")


# Modules a worker runs whole under -n, in file order (see pytest_xdist_make_scheduler): their
# module-scoped fixtures are slow to make (a Spark Connect server, one run every test reads), and
# test_spark_server's last test kills the server the others use.
WHOLE_MODULES = ("cdc_assets_tests/cli/test_spark_server.py", "cdc_assets_tests/defs/test_backfill.py",
                 "cdc_assets_tests/engine/test_bad_input_catalog.py", "cdc_assets_tests/engine/test_crash.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n`'s default distribution (`--dist load`): tests go to the workers one at a time as they
    free up, except that each of WHOLE_MODULES goes whole to one worker, ahead of the single tests
    (pytest-xdist orders such units by their number of tests). pytest-xdist's own way to keep
    tests together, `--dist loadgroup` with xdist_group marks, has no effect with pytest 9.2: it
    appends the group to the node id, which pytest 9.2 no longer reads. Another `--dist` gets
    pytest-xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TestsOrWholeModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in WHOLE_MODULES else nodeid

    return TestsOrWholeModules(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per core, at most two. Each worker holds a Spark session of its own
    (a 2 GB driver heap) and runs Spark's local[2] and the tests' child processes; two are what the
    suite is measured and made safe with."""
    return max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def long_run(request) -> bool:
    return bool(request.config.getoption("--long"))


@pytest.fixture(scope="session")
def figures(request, tmp_path_factory) -> Figures | None:
    """A writer of figure files when the run was asked for them (`--figures DIR`), else None. The
    workers of one run (pytest-xdist) share a ledger of the files they wrote, in the run's temporary
    folder (each worker's own is a folder in it)."""
    ledger = None
    if hasattr(request.config, "workerinput"):
        ledger = str(tmp_path_factory.getbasetemp().parent / "figures-written.txt")
    return from_request(request.config.getoption("--figures"), force=request.config.getoption("--figures-force-dirty"),
                        ledger=ledger)


@pytest.fixture(scope="session")
def spark():
    """The process's Spark session; Dagster runs in this process reuse it (getOrCreate)."""
    from pyspark.sql import SparkSession

    from cdc_assets.engine.spark import spark_settings

    builder = SparkSession.builder
    for k, v in spark_settings().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def spark_when_needed(request):
    """A function returning the process's Spark session, started by the first call: an engine step
    that needs no Spark (a small batch, a small build) starts none."""
    return lambda: request.getfixturevalue("spark")


@pytest.fixture
def workdir(tmp_path):
    """A folder with landing/ and warehouse/ and a helper to write cdc.yaml."""
    (tmp_path / "landing").mkdir()
    return tmp_path


@pytest.fixture(scope="session")
def cli() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "cdc-assets")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "cdc_assets.cli.main"]


@pytest.fixture(scope="session")
def shared_dir() -> str:
    if not os.path.isdir(SHARED):
        pytest.skip("../shared is not beside the repository")
    return SHARED


def copy_batch(src: str, dst: str) -> None:
    shutil.copytree(src, dst)
