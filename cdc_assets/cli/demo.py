"""`cdc-assets demo`."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="(not built yet)")
    p.set_defaults(func=lambda args: 2)
