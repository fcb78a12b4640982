"""Measured figures, written to files so the README quotes a file, never a number worked out by hand.

Tests write figures only when asked (`--figures DIR`, or `CDC_ASSETS_FIGURES=DIR`), so a normal test
run leaves the work tree clean; the scripts under `benchmarks/` take the folder as `--out`.

    ./bootstrap.sh test cdc_assets_tests/engine/test_crash.py --figures docs/figures

In a test, ask for the `figures` fixture: it is a `Figures` writer, or None when nobody asked.

    def test_something(figures):
        ...
        if figures:
            figures.write_json("something.json", {"feeds": 216, "passed": 216},
                               command="./bootstrap.sh test cdc_assets_tests/x.py --figures docs/figures")
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import os
import subprocess

ENV = "CDC_ASSETS_FIGURES"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _commit() -> str | None:
    """The commit of the code that measured ("+dirty" when its tree had edits)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class Figures:
    """Writes figure files into one folder; each JSON file says which command produced it and when."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        os.makedirs(self.folder, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def write_json(self, name: str, figures: dict, command: str) -> str:
        data = {"command": command, "commit": _commit(),
                "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **figures}
        with open(self.path(name), "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        return self.path(name)

    def write_csv(self, name: str, header: list[str], rows: list) -> str:
        with open(self.path(name), "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            w.writerows(rows)
        return self.path(name)


def from_request(option: str | None) -> Figures | None:
    folder = option or os.environ.get(ENV)
    return Figures(folder) if folder else None
