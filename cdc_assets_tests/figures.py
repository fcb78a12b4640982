"""Measured figures, written to files so the README quotes a file, never a number worked out by hand.

Tests write figures only when asked (`--figures DIR`, or `CDC_ASSETS_FIGURES=DIR`), so a normal test
run leaves the work tree clean; the scripts under `benchmarks/` take the folder as `--out`. Each JSON
file records the commit that measured and whether its tree had uncommitted changes (`dirty`, and
which files); into docs/figures a tree with uncommitted changes is refused before anything is
measured, unless forced (`--force-dirty`, `--figures-force-dirty` for tests, or
CDC_ASSETS_FIGURES_FORCE_DIRTY=1), so that the docs can name the commit of every figure they quote.

    ./bootstrap.sh test cdc_assets_tests/engine/test_crash.py --figures docs/figures

In a test, ask for the `figures` fixture: it is a `Figures` writer, or None when nobody asked.

    def test_something(figures):
        ...
        if figures:
            figures.write_json("something.json", {"feeds": 216, "passed": 216},
                               command="./bootstrap.sh test cdc_assets_tests/x.py --figures docs/figures")
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import os
import subprocess
import tempfile

ENV = "CDC_ASSETS_FIGURES"
FORCE_ENV = "CDC_ASSETS_FIGURES_FORCE_DIRTY"  # "1": write into docs/figures from a tree with edits
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORCE_FLAG = "--force-dirty"


@dataclasses.dataclass(frozen=True)
class Tree:
    """The commit of the code that measures, and the tracked files it has changed since (a dirty tree)."""

    commit: str | None
    uncommitted: tuple[str, ...] = ()

    @property
    def dirty(self) -> bool:
        return bool(self.uncommitted)


def tree(repo: str = REPO) -> Tree:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return Tree(None)
    if head.returncode != 0:
        return Tree(None)
    return Tree(head.stdout.strip(), tuple(line[3:] for line in status.stdout.splitlines() if line.strip()))


def measured_at(repo: str = REPO) -> str:
    """Where a written table says it was measured: "at commit `abc1234`", or "on a tree with
    uncommitted changes at commit `abc1234`"."""
    now = tree(repo)
    return f"at commit `{now.commit}`" if not now.dirty else f"on a tree with uncommitted changes at commit `{now.commit}`"


class DirtyTree(Exception):
    """Figures for docs/figures measured by code that is no commit: the docs could name no commit for them."""


def add_force_flag(parser: argparse.ArgumentParser) -> None:
    """A script's flag to write into docs/figures from a tree with uncommitted changes."""
    parser.add_argument(FORCE_FLAG, action="store_true",
                        help="write into docs/figures even from a tree with uncommitted changes (the files then "
                             "say dirty: true and list them); without it such a run stops before measuring")


class Figures:
    """Writes figure files into one folder; each JSON file says which command produced it, when, at
    which commit and whether the tree had uncommitted changes. A folder under the repository's
    docs/figures is refused from such a tree unless `force` (the docs name a commit for each figure)."""

    def __init__(self, folder: str, force: bool = False, repo: str = REPO, ledger: str | None = None):
        """`ledger`: a file the writers of one measurement in several processes (pytest-xdist's
        workers) share, listing every file each wrote, so that none takes another's figures for
        uncommitted code."""
        self.folder = os.path.abspath(folder)
        self.repo, self.force = repo, force or os.environ.get(FORCE_ENV) == "1"
        self.ledger = ledger
        self._written: set[str] = set()  # the files this measurement wrote: figures, not code
        self.tree = self._now()  # at the start of the measurement: a refused run stops before measuring
        self._refuse(self.tree)
        os.makedirs(self.folder, exist_ok=True)

    def _into_docs(self) -> bool:
        docs = os.path.realpath(os.path.join(self.repo, "docs", "figures"))
        return os.path.commonpath([docs, os.path.realpath(self.folder)]) == docs

    def _refuse(self, now: Tree, kept: str | None = None) -> None:
        if not (now.dirty and not self.force and self._into_docs()):
            return
        shown = ", ".join(now.uncommitted[:10]) + (", ..." if len(now.uncommitted) > 10 else "")
        raise DirtyTree(f"refusing to write figures into {self.folder}: the tree at {now.commit} has uncommitted "
                        f"changes ({shown}); commit them first, write elsewhere (--out), or pass {FORCE_FLAG} "
                        f"({FORCE_ENV}=1 for tests) to record the figures as measured on a dirty tree"
                        + (f"; this measurement's figures were written to {kept}" if kept else ""))

    def _now(self) -> Tree:
        """The tree now, but for the files this measurement wrote (each over its committed figure)."""
        now = tree(self.repo)
        written = self._written | self._ledgered()
        return Tree(now.commit, tuple(f for f in now.uncommitted
                                      if os.path.realpath(os.path.join(self.repo, f)) not in written))

    def _ledgered(self) -> set[str]:
        if not self.ledger or not os.path.exists(self.ledger):
            return set()
        with open(self.ledger, encoding="utf-8") as fh:
            return set(fh.read().splitlines())

    def _record(self, where: str) -> None:
        """`where` is this measurement's, entered before the file is written: a writer in another
        process that looks at the tree meanwhile finds it already listed."""
        self._written.add(os.path.realpath(where))
        if self.ledger:
            # one short append per line: appends of the workers do not interleave within a line
            with open(self.ledger, "a", encoding="utf-8") as fh:
                fh.write(os.path.realpath(where) + "\n")

    def path(self, name: str) -> str:
        """Where figure file `name` goes; refused (DirtyTree) when the tree has become dirty since the
        measurement began, as at the start."""
        self._refuse(self._now())
        where = os.path.join(self.folder, name)
        self._record(where)
        return where

    def write_json(self, name: str, figures: dict, command: str) -> str:
        """`figures` with the command, the commit, whether the tree was dirty (and its changed files)
        and the time. A tree that became dirty during the measurement is refused as at the start, the
        file then kept in a temporary folder that the error names."""
        now = self._now()
        changed = tuple(dict.fromkeys(self.tree.uncommitted + now.uncommitted))
        data = {"command": command, "commit": now.commit, "dirty": bool(changed),
                **({"uncommitted": list(changed)} if changed else {}),
                **({"commit_at_start": self.tree.commit} if self.tree.commit != now.commit else {}),
                "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **figures}
        kept = None
        if changed and not self.force and self._into_docs():
            kept = tempfile.mkdtemp(prefix="figures-dirty-")
        where = os.path.join(kept or self.folder, name)
        self._record(where)
        with open(where, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        if kept:
            self._refuse(Tree(now.commit, changed), kept)
        return where

    def write_csv(self, name: str, header: list[str], rows: list) -> str:
        where = self.path(name)
        with open(where, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            w.writerows(rows)
        return where


def from_request(option: str | None, force: bool = False, ledger: str | None = None) -> Figures | None:
    folder = option or os.environ.get(ENV)
    return Figures(folder, force=force, ledger=ledger) if folder else None
