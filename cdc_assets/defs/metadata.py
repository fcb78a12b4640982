"""Engine figures as Dagster metadata a user can read in the UI."""
from __future__ import annotations

import dagster as dg


def as_metadata(figures: dict) -> dict:
    out = {}
    for k, v in figures.items():
        if isinstance(v, bool):
            out[k] = dg.MetadataValue.bool(v)
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        elif isinstance(v, float):
            out[k] = dg.MetadataValue.float(v)
        elif isinstance(v, (list, dict)):
            out[k] = dg.MetadataValue.json(v)
        elif v is not None:
            out[k] = dg.MetadataValue.text(str(v))
    return out
