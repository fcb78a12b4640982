"""`cdc-assets status`."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("status", help="(not built yet)")
    p.set_defaults(func=lambda args: 2)
