"""The format registry (core/formats.SPECS) is the one place a format's traits are known: what the
engine asks of a table (truncates, images leaving columns out, whole exports, BigQuery tables)
comes from it, and the starter configuration names every format a user writes."""
from __future__ import annotations

import pytest

from cdc_assets.core import postgres
from cdc_assets.core.config import BIGQUERY_SOURCE_FORMATS, parse_config
from cdc_assets.core.formats import FORMATS, SNAPSHOT, SPECS
from cdc_assets.core.starter import STARTER_CONFIG

CHANGESET = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"]}


def _table(**fields):
    return parse_config({"warehouse": "w", "landing": "l", "tables": [{"name": "T", "keys": ["id"], **fields}]},
                        "/tmp/cdc.yaml").tables[0]


@pytest.mark.parametrize(("fields", "truncates"), [
    ({"format": "datastream-json"}, False),
    ({"format": "bigquery-cdc"}, False),
    ({"format": "changeset", "options": CHANGESET}, False),
    ({"format": "changeset", "options": {**CHANGESET, "truncates": ["T"]}}, True),
    ({"format": "debezium-json"}, True),
    ({"source": "postgresql://app@db.example:5432/shop/public.orders"}, True),
])
def test_a_table_carries_truncates_by_its_format_or_its_options(fields, truncates):
    assert _table(**fields).carries_truncates is truncates


def test_each_trait_has_its_formats():
    assert [f for f, s in SPECS.items() if s.whole_exports] == [SNAPSHOT]
    assert [f for f, s in SPECS.items() if s.leaves_columns_out] == ["debezium-json"]
    assert BIGQUERY_SOURCE_FORMATS == ("bigquery-append", "bigquery-cdc")
    assert all((s.parse is None) == s.whole_exports for s in SPECS.values())


def test_the_starter_configuration_names_every_format_a_user_writes():
    line = next(x for x in STARTER_CONFIG.splitlines() if x.strip().startswith("format:"))
    named = {f.strip() for f in line.split("#", 1)[1].split("|")}
    assert named == set(FORMATS) - {postgres.FORMAT}  # a PostgreSQL source's format is implied
