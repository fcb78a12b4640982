"""Run a command and write what it measured to a figures file: its wall seconds, exit code and the
last lines it printed (where the demo and the conformance runner print their results).

    .venv/bin/python -m cdc_assets_tests.benchmarks.record --name demo --out docs/figures -- ./bootstrap.sh demo
    .venv/bin/python -m cdc_assets_tests.benchmarks.record --name conformance --out docs/figures -- \\
        .venv/bin/python ../shared/conformance/run_conformance.py --cli "$PWD/.venv/bin/cdc-assets"

writes docs/figures/<name>.json; the command's output still goes to the terminal.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time

from cdc_assets_tests.figures import Figures, add_force_flag

TAIL = 20  # lines of output kept: the results are printed at the end


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the figures file: <out>/<name>.json")
    ap.add_argument("--out", default="docs/figures")
    add_force_flag(ap)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (put it after --)")
    figures = Figures(args.out, force=args.force_dirty)  # refused before running from a dirty tree
    t0 = time.time()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines = (lines + [line.rstrip("\n")])[-TAIL:]
    rc = proc.wait()
    path = figures.write_json(f"{args.name}.json", {
        "exit_code": rc, "seconds": round(time.time() - t0, 1), "output_tail": lines,
    }, command=shlex.join(command))
    print(f"written: {path}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
