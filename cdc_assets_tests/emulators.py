"""Google Cloud's local emulators, started from PyPI packages in the test process (FIELD_NOTES,
"Google Cloud, locally"): no account, no network. Child processes (`cdc-assets run`, Spark's
Python workers) find them through the environment variables the fixtures set."""
from __future__ import annotations

import pytest

GCS_BUCKET = "landing-bucket"
PROJECT = "cdc-assets-test"


@pytest.fixture
def gcs_bucket(monkeypatch):
    """An in-memory GCS emulator (gcp-storage-emulator) with one bucket, GCS_BUCKET."""
    from gcp_storage_emulator.server import create_server
    from google.cloud import storage

    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=GCS_BUCKET)
    server.start()
    port = server._api._httpd.server_address[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    try:
        yield storage.Client().bucket(GCS_BUCKET)
    finally:
        server.stop()


def put(bucket, name: str, data: str | bytes) -> None:
    bucket.blob(name).upload_from_string(data.encode("utf-8") if isinstance(data, str) else data)
