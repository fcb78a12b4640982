"""Security basics: the UI binds this machine only; configurations cannot point a table out of
the warehouse or the landing area, and a bad one stops `run` before anything is written."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

from cdc_assets.cli.main import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listeners(port: int) -> set[str]:
    """Local addresses listening on `port`, from /proc/net/tcp{,6} (no extra tools needed)."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        with open(name) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                    found.add(addr)
    return found


def test_the_ui_listens_on_127_0_0_1_only(tmp_path, cli):
    cfg = tmp_path / "cdc.yaml"
    cfg.write_text(json.dumps({"warehouse": "./warehouse", "landing": "./landing",
                               "tables": [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}]}))
    port = _free_port()
    proc = subprocess.Popen([*cli, "ui", "--config", str(cfg), "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not _listeners(port):
            assert proc.poll() is None, "dagster dev exited"
            time.sleep(1)
        addresses = _listeners(port)
        assert addresses == {"0100007F"}, addresses  # 127.0.0.1, little-endian hex; not 0.0.0.0 nor ::
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(60)


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
