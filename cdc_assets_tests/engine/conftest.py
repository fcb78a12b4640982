"""Fixtures the PostgreSQL source's test modules share."""
from __future__ import annotations

import pytest

from cdc_assets_tests.support.config import write_config


@pytest.fixture(params=["changelog", "logical"])
def orders_by_method(request, postgres_db, workdir):
    """(cluster, database, cfg): public.orders (test_postgres_source.SOURCE_DDL) captured by each method in turn."""
    from cdc_assets_tests.engine.test_postgres_source import SOURCE_DDL

    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute(SOURCE_DDL)
    return cluster, db, write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders"),
                                                "capture": request.param}])
