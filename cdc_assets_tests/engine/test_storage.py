"""The warehouse's store settings and file operations: what delta-rs is told for each kind of
location, and the same file operations on a local folder and on an S3-compatible server (moto)."""
from __future__ import annotations

import pytest

from cdc_assets.engine import storage

S3_ENV = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
          "AWS_DEFAULT_REGION": "eu-west-1"}


def test_a_local_warehouse_has_no_storage_options():
    assert storage.delta_options("/data/warehouse/T/target") is None
    assert storage.delta_options("./warehouse") is None
    assert not storage.is_remote("file:///data/warehouse")


def test_s3_commits_are_conditional_unless_a_locking_provider_is_named():
    opts = storage.delta_options("s3://b/wh/T/target", S3_ENV)
    # two writers racing for one commit file cannot both win: S3 refuses the second If-None-Match PUT
    assert opts["aws_conditional_put"] == "etag"
    assert opts["aws_endpoint_url"] == "http://127.0.0.1:9" and opts["aws_allow_http"] == "true"
    assert opts["aws_region"] == "eu-west-1" and opts["aws_access_key_id"] == "k"
    locked = storage.delta_options("s3://b/wh", {**S3_ENV, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
                                                 "DELTA_DYNAMO_TABLE_NAME": "delta_log"})
    assert "aws_conditional_put" not in locked and locked["aws_s3_locking_provider"] == "dynamodb"


def test_cloud_storage_takes_a_key_file_or_application_default_credentials():
    assert storage.delta_options("gs://b/wh", {}) == {}
    assert storage.delta_options("gs://b/wh", {"GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json"}) == \
        {"google_application_credentials": "/keys/sa.json"}


def test_settings_carry_only_the_stores_variables(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    monkeypatch.setenv("HOME_SECRET", "x")
    s = storage.settings()
    assert s["AWS_REGION"] == "us-east-1" and s["GOOGLE_CLOUD_PROJECT"] == "p" and "HOME_SECRET" not in s


@pytest.fixture(params=["local", "s3"])
def folder(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "wh")
    return request.getfixturevalue("s3_warehouse")


def test_file_operations_behave_alike_on_a_folder_and_a_bucket(folder):
    note = storage.join(folder, "T", "_cdc_last_run.json")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(note)
    assert storage.list_names(storage.join(folder, "T")) == []
    storage.write_bytes(note, b'{"ok": true}')
    storage.write_bytes(note, b'{"ok": false}')  # replaced whole
    assert storage.read_bytes(note) == b'{"ok": false}'
    assert storage.size(note) == len(b'{"ok": false}')
    assert storage.list_names(storage.join(folder, "T")) == ["_cdc_last_run.json"]  # no leftover temp file
    assert storage.basename(note) == "_cdc_last_run.json"
    storage.remove_tree(storage.join(folder, "T"))
    storage.remove_tree(storage.join(folder, "T"))  # already gone: nothing to do
    assert storage.list_names(storage.join(folder, "T")) == []
