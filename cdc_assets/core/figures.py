"""Figures by name: the base of every result that becomes Dagster metadata and JSON.

`to_metadata()` gives a result's entries by name, in its fields' order (the Dagster wiring gives
each value its Dagster type), `to_json()` the same entries as JSON values; a field that is None is
no entry. `from_metadata` reads a result back from its entries.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

_R = TypeVar("_R", bound="Figures")


@dataclasses.dataclass(frozen=True)
class Figures:
    """Figures by name, for Dagster metadata and JSON: a field that is None is no entry."""

    def to_metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self) -> dict[str, Any]:
        return self.to_metadata()

    @classmethod
    def from_metadata(cls: type[_R], entries: Mapping[str, object]) -> _R:
        """The result from its metadata entries' values; entries of other names are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in entries.items() if k in known})
