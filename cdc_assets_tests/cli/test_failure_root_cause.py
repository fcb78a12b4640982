"""A failed step's summary line and `status` name the root cause, not Dagster's wrapper."""
from __future__ import annotations

import glob
import json
import os

import dagster as dg

from cdc_assets.cli.main import main
from cdc_assets.defs.run_loop import summary_line
from cdc_assets.engine.errors import root_cause_of_info
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import run_table


def test_a_spark_job_failing_on_a_damaged_file_names_the_java_exception(spark, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")  # whole builds on Spark, however small the table
    cfg = write_config(tmp_path, [{"name": "T", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "T", "batch-1", {"part-1.jsonl": jsonl([mysql("INSERT", {"id": i, "x": i}, 1, 10 + i)
                                                      for i in range(50)])})
    instance = dg.DagsterInstance.ephemeral()
    assert run_table(cfg, "T", instance).ok
    # The data files of `staging` are damaged (a storage fault). The next batch widens column x from
    # integers to decimals, so target is rewritten from staging by a Spark job, which fails in an
    # executor: a Java exception behind several wrappers.
    damaged = glob.glob(os.path.join(cfg.table_dir("T"), "staging", "**", "*.parquet"), recursive=True)
    assert damaged
    for f in damaged:
        with open(f, "wb") as fh:
            fh.write(b"not parquet" * 100)
    land(cfg, "T", "batch-2", {"part-1.jsonl": jsonl([mysql("UPDATE", {"id": 1, "x": 2.5}, 1, 100)])})

    outcome = run_table(cfg, "T", instance)

    line = summary_line(outcome)
    assert line.startswith("T: FAILED"), line
    assert "Dagster" not in line and "Error occurred while executing" not in line, line
    error = line.split("error: ", 1)[1].rsplit("; ", 1)[0]  # up to the seconds
    # The step, then the innermost Java exception: not SparkException's "Job aborted due to stage failure".
    assert error.startswith("step T__target: java.lang.RuntimeException: file:"), line
    assert "is not a Parquet file" in error, line
    assert any(os.path.basename(f) in error for f in damaged), line  # names the damaged file

    capsys.readouterr()
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["last_error"].startswith(error), status
    assert "staging_unreadable" in status, status  # status still answers, and says what it could not read


class _Info:
    """The shape of Dagster's SerializableErrorInfo: cls_name, message, cause, context."""

    def __init__(self, cls_name, message, cause=None, context=None):
        self.cls_name, self.message, self.cause, self.context = cls_name, message, cause, context


def test_a_driver_out_of_memory_error_is_reduced_to_the_java_line():
    # The shape the 5 M-row base import failed with: Dagster's wrapper around a Py4J error.
    py4j = _Info("Py4JJavaError", "py4j.protocol.Py4JJavaError: An error occurred while calling o412.collectToPython.\n"
                 ": java.lang.OutOfMemoryError: Java heap space\n\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)\n"
                 "\tat org.apache.spark.sql.Dataset.collectToPython(Dataset.scala:4181)\n")
    wrapper = _Info("DagsterExecutionStepExecutionError",
                    'dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op "BENCH__base":\n',
                    cause=py4j)
    assert root_cause_of_info(wrapper) == "java.lang.OutOfMemoryError: Java heap space"


def test_an_error_without_a_java_trace_keeps_its_own_class_and_first_line():
    inner = _Info("KeyError", "KeyError: 'amount'\n")
    outer = _Info("ValueError", "ValueError: row 3 of base.csv cannot be read\n", context=inner)
    wrapper = _Info("DagsterExecutionStepExecutionError", "Error occurred while executing op", cause=outer)
    assert root_cause_of_info(wrapper) == "KeyError: 'amount'"
