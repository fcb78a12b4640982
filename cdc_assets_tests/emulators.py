"""Google Cloud's local emulators, started from PyPI packages in the test process (FIELD_NOTES,
"Google Cloud, locally"; cdc_assets/cli/emulators.py starts them): no account, no network. Child
processes (`cdc-assets run`, Spark's Python workers) find them through the environment variables
the fixtures set."""
from __future__ import annotations

import uuid

import pytest

from cdc_assets.cli import emulators

GCS_BUCKET = "landing-bucket"
PROJECT = "cdc-assets-test"


@pytest.fixture
def gcs_bucket(monkeypatch):
    """An in-memory GCS emulator (gcp-storage-emulator) with one bucket, GCS_BUCKET."""
    from google.cloud import storage

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    with emulators.storage(GCS_BUCKET):
        yield storage.Client().bucket(GCS_BUCKET)


def put(bucket, name: str, data: str | bytes) -> None:
    bucket.blob(name).upload_from_string(data.encode("utf-8") if isinstance(data, str) else data)


WAREHOUSE_BUCKET = "warehouse-bucket"


@pytest.fixture
def s3_warehouse():
    """An in-memory S3-compatible server (moto) with one bucket; yields the URL of a warehouse in
    it, s3://WAREHOUSE_BUCKET/<unique>. The AWS_* variables it sets reach delta-rs, Arrow, and the
    child processes."""
    with emulators.s3(WAREHOUSE_BUCKET):
        yield f"s3://{WAREHOUSE_BUCKET}/wh-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def _bigquery_server():
    """One in-memory BigQuery emulator (bqemulator, DuckDB inside) for the test session."""
    with emulators.bigquery() as address:
        yield address


@pytest.fixture
def bigquery_emulator(_bigquery_server, monkeypatch):
    """A client of the BigQuery emulator, whose address BIGQUERY_EMULATOR_HOST gives this process
    and its children; each test gets a dataset of its own, `client.test_dataset`."""
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", _bigquery_server)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    client = emulators.bigquery_client(_bigquery_server, PROJECT)
    client.test_dataset = f"ds_{uuid.uuid4().hex[:10]}"
    client.create_dataset(client.test_dataset)
    yield client
