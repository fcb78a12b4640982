"""Every `cdc-assets` command ends with its own exit status, run after run: the process ends right
after its output is flushed, so no native thread torn down at interpreter exit can turn a pass into
an abort (status 134) or a failure into another status."""
from __future__ import annotations

import subprocess

from cdc_assets_tests.support.config import write_config


def test_the_program_exits_with_the_status_of_its_command(workdir, cli):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    cases = [
        (["status", "--config", cfg.path], 0, "ORDERS"),  # passes
        (["run", "--config", cfg.path, "--table", "NOPE"], 2, "no table 'NOPE'"),  # refuses
        (["status", "--config", str(workdir / "missing.yaml")], 2, "missing.yaml"),  # no configuration
        (["no-such-command"], 2, "invalid choice"),  # argparse's usage error
    ]
    for _ in range(3):
        for argv, status, said in cases:
            proc = subprocess.run(cli + argv, capture_output=True, text=True, timeout=300)
            assert (proc.returncode, said in proc.stdout + proc.stderr) == (status, True), (argv, proc.stderr[-2000:])


# The program as its console script runs it, with an exit hook standing for the native threads'
# teardown (which runs at the same stage: interpreter exit).
PROGRAM = """
import atexit, sys
atexit.register(lambda: print("interpreter teardown ran", flush=True))
from cdc_assets.cli.main import main
sys.argv = ["cdc-assets", *sys.argv[1:]]
sys.exit(main())
"""


def test_the_program_ends_before_interpreter_teardown_with_its_output_flushed(workdir):
    import sys

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    for argv, status in ((["status", "--config", cfg.path], 0), (["run", "--config", cfg.path, "--table", "NOPE"], 2)):
        proc = subprocess.run([sys.executable, "-c", PROGRAM, *argv], capture_output=True, text=True, timeout=300)
        assert proc.returncode == status, proc.stderr[-2000:]
        assert "interpreter teardown ran" not in proc.stdout
        assert proc.stdout.strip() or proc.stderr.strip()  # what the command said was flushed before the end


def test_an_error_a_command_leaves_unhandled_maps_to_its_exit_status_by_kind():
    from cdc_assets.cli.main import TRY_AGAIN, exit_status
    from cdc_assets.core.config import ConfigError
    from cdc_assets.engine.delta import CommitConflict
    from cdc_assets.engine.rekey import RekeyNeeded

    assert exit_status(ConfigError("cdc.yaml: field 'tables' is required")) == 2
    assert exit_status(CommitConflict("another writer committed first")) == TRY_AGAIN == 75
    assert exit_status(RekeyNeeded("run cdc-assets rekey T once")) == 1
