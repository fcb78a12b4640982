"""`cdc-assets init DIR`: a folder to start a project from."""
from __future__ import annotations

import os
import sys

from ..core.starter import STARTER_CONFIG, STARTER_WORKSPACE


def register(sub) -> None:
    p = sub.add_parser("init", help="write a commented cdc.yaml, a workspace.yaml and a landing folder into DIR",
                       description="Write into DIR (created when missing) a commented cdc.yaml with one table, "
                                   "a workspace.yaml for `dagster dev`, and the table's landing folder. Nothing "
                                   "is overwritten. Exit 2: DIR already holds a cdc.yaml or workspace.yaml.")
    p.add_argument("dir", help="the project folder")
    p.set_defaults(func=main)


def main(args) -> int:
    folder = os.path.abspath(args.dir)
    files = {"cdc.yaml": STARTER_CONFIG, "workspace.yaml": STARTER_WORKSPACE}
    present = [name for name in files if os.path.exists(os.path.join(folder, name))]
    if present:
        print(f"cdc-assets init: {folder} already has {' and '.join(present)}; nothing written", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(folder, "landing", "ORDERS"), exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(folder, name), "x", encoding="utf-8") as fh:
            fh.write(text)
    print(f"wrote {folder}/cdc.yaml, workspace.yaml and landing/ORDERS/\n"
          f"next: land change files under {folder}/landing/ORDERS/, then\n"
          f"  cdc-assets run --config {folder}/cdc.yaml     (or: cdc-assets ui --config {folder}/cdc.yaml)")
    return 0
