"""The environment variables cdc_assets reads: one typed settings object, read when a step asks (a
variable set after import holds), a wrong value named with its variable (exit status 2 from a
command), and no variable read anywhere else in the package."""
from __future__ import annotations

import os
import re

import pytest

from cdc_assets.cli.main import main
from cdc_assets.engine import spark_conf
from cdc_assets.engine.settings import SettingError, Settings, settings, variables
from cdc_assets_tests.support.config import write_config

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "cdc_assets")


def test_each_setting_is_read_from_its_variable_when_asked(monkeypatch):
    for name in variables():
        monkeypatch.delenv(name, raising=False)
    assert settings() == Settings()
    assert (settings().local_build_rows, settings().config, settings().debug) == (10_000_000, None, False)
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    monkeypatch.setenv("CDC_ASSETS_DEBUG", "1")
    monkeypatch.setenv("CDC_ASSETS_SPARK_MASTER", "spark://127.0.0.1:7077")
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "")  # empty: the default
    now = settings()
    assert (now.local_build_rows, now.debug, now.local_apply_rows) == (0, True, 1_000_000)
    # a module imported before the variable was set sees it too
    assert spark_conf.in_process_settings({"spark.master": "local[1]"})["spark.master"] == "spark://127.0.0.1:7077"


def test_a_value_of_the_wrong_kind_names_its_variable(monkeypatch, workdir, capsys):
    monkeypatch.setenv("CDC_ASSETS_LOCAL_PARSE_BYTES", "32MiB")
    with pytest.raises(SettingError, match=r"CDC_ASSETS_LOCAL_PARSE_BYTES='32MiB': a whole number is needed"):
        settings()
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    assert main(["status", "--config", cfg.path]) == 2  # as for a wrong cdc.yaml, before anything is done
    out = capsys.readouterr()
    assert "CDC_ASSETS_LOCAL_PARSE_BYTES='32MiB': a whole number is needed" in out.err and out.out == ""


def test_no_module_reads_a_variable_of_its_own():
    mentioned, read_elsewhere = set(), []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            mentioned |= set(re.findall(r"CDC_ASSETS_[A-Z_]+", text))
            if not path.endswith(os.path.join("engine", "settings.py")):
                read_elsewhere += [f"{path}: {line.strip()}" for line in text.splitlines()
                                   if re.search(r"(os\.environ|getenv).*CDC_ASSETS_|= *\"CDC_ASSETS_", line)]
    assert mentioned <= set(variables())  # every variable a docstring or message names is a setting
    assert read_elsewhere == []
