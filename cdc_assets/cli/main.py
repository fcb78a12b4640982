"""`cdc-assets`: run, status, read, history, restore, maintain, rekey, generate, demo, ui, spark."""
from __future__ import annotations

import argparse
import importlib.metadata
import sys

from . import demo, generate, maintain, read, rekey, run, spark, status, ui, versions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-assets", description=__doc__)
    parser.add_argument("--version", action="version",
                        version=f"cdc-assets {importlib.metadata.version('cdc_assets')}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (run, status, read, versions, maintain, rekey, generate, demo, ui, spark):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
