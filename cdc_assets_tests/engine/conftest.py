"""Fixtures the PostgreSQL source's test modules share."""
from __future__ import annotations

import pytest

from cdc_assets_tests.support.postgres_source import orders_table


@pytest.fixture(params=["changelog", "logical"])
def orders_by_method(request, postgres_db, workdir):
    """(cluster, database, cfg): public.orders (support/postgres_source.SOURCE_DDL) captured by each method in turn."""
    return orders_table(postgres_db, workdir, request.param)
