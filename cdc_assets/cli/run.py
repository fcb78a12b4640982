"""`cdc-assets run`."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("run", help="(not built yet)")
    p.set_defaults(func=lambda args: 2)
