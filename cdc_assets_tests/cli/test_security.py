"""Security basics: the UI binds this machine only; configurations cannot point a table out of
the warehouse or the landing area, and a bad one stops `run` before anything is written."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from cdc_assets.cli.main import main
from cdc_assets.core.config import load_config
from cdc_assets.engine import connect
from cdc_assets_tests.support.ports import free_port
from cdc_assets_tests.support.ports import listeners as _listeners

LOOPBACK = ({"0100007F"}, {"0000000000000000FFFF00000100007F"})  # 127.0.0.1 as IPv4, or IPv4 inside IPv6


def test_the_ui_and_its_spark_server_listen_on_127_0_0_1_only_and_the_server_stops_with_the_ui(tmp_path, cli):
    cfg = tmp_path / "cdc.yaml"
    cfg.write_text(json.dumps({"warehouse": "./warehouse", "landing": "./landing",
                               "tables": [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}]}))
    config = load_config(str(cfg))
    port = free_port()
    proc = subprocess.Popen([*cli, "ui", "--config", str(cfg), "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    server = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and (not _listeners(port) or connect.live(config) is None):
            assert proc.poll() is None, "cdc-assets ui exited"
            time.sleep(1)
        addresses = _listeners(port)
        assert addresses == {"0100007F"}, addresses  # 127.0.0.1, little-endian hex; not 0.0.0.0 nor ::
        server = connect.live(config)
        assert server is not None, "the UI's Spark Connect server did not come up"
        assert _listeners(server.port) in LOOPBACK, _listeners(server.port)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(90)
    assert connect.recorded(config) is None
    assert connect.unhealthy(server) is not None  # its JVM is gone


@pytest.mark.parametrize("change, expected", [
    ({"tables": [{"name": "../ORDERS", "keys": ["id"], "format": "bigquery-cdc"}]}, "'../ORDERS'"),
    ({"tables": [{"name": "ORDERS/../../etc", "keys": ["id"], "format": "bigquery-cdc"}]}, "name"),
    ({"landing": "./warehouse/landing"}, "must not contain each other"),
    ({"tables": [{"name": "ORDERS", "format": "bigquery-cdc"}]}, "keys"),
    ({"tables": [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc", "path": "../x"}]}, "unknown field 'path'"),
])
def test_a_bad_configuration_stops_run_before_anything_is_written(tmp_path, capsys, change, expected):
    raw = {"warehouse": "./warehouse", "landing": "./landing",
           "tables": [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}], **change}
    (tmp_path / "cdc.yaml").write_text(json.dumps(raw))
    (tmp_path / "landing" / "ORDERS").mkdir(parents=True)
    (tmp_path / "landing" / "ORDERS" / "a.jsonl").write_text('{"id": 1, "_CHANGE_TYPE": "UPSERT"}\n')
    assert main(["run", "--config", str(tmp_path / "cdc.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cdc-assets: cdc.yaml:") and expected in err, err
    assert not (tmp_path / "warehouse").exists()
    assert sorted(os.listdir(tmp_path)) == ["cdc.yaml", "landing"]


SECRET = "s3cr3t-4c9e1f"


@pytest.mark.parametrize("source", [
    f"postgresql://cdc@127.0.0.1:5432/shop/public.orders?password={SECRET}",
    f"postgresql://cdc@127.0.0.1:5432/shop/public.orders?sslmode=require&PassWord={SECRET}&connect_timeout=5",
    f"postgresql://cdc@127.0.0.1:5432/shop/public.orders?SSLPASSWORD={SECRET}",
    f"postgresql://cdc@127.0.0.1:5432/shop/public.orders?pass%77ord={SECRET}",  # a percent-encoded key
    f"postgresql://cdc:{SECRET}@127.0.0.1:5432/shop/public.orders",
    f"postgresql://cdc:{SECRET}@127.0.0.1:5432/shop/public.orders?password={SECRET}",
    f"POSTGRES://cdc:{SECRET}@127.0.0.1:5432/shop?Password={SECRET}",
    f"host=127.0.0.1 port=5432 dbname=shop user=cdc password={SECRET}",  # libpq's key=value form
    f"host=127.0.0.1 dbname=shop sslpassword = '{SECRET} and more'",
])
def test_a_password_in_a_source_is_never_printed_in_any_of_its_forms(tmp_path, capsys, source):
    """A source holding a password (which cdc.yaml refuses: libpq reads it from PGPASSWORD or ~/.pgpass)
    fails every command as a configuration error naming the table's field, with the password masked."""
    # a source that is no postgresql:// URL is read as a BigQuery table's, whose format it then needs
    table = {"name": "ORDERS", "source": source} if source.startswith("postgresql://") else \
        {"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc", "source": source, "source_position": "t"}
    (tmp_path / "cdc.yaml").write_text(json.dumps({"warehouse": "./warehouse", "landing": "./landing",
                                                   "tables": [table]}))
    for command in (["run"], ["capture", "enable"], ["capture", "status"], ["status"]):
        assert main([*command, "--config", str(tmp_path / "cdc.yaml")]) == 2, command
        out, err = capsys.readouterr()
        assert SECRET not in out + err, (command, err)
        assert "field 'source'" in err and "***" in err, (command, err)
