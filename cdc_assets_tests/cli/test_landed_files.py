"""Landed files are content, not names: a file appended to or replaced under the same name after a
run took it is noticed by the next `cdc-assets run` (an append as the new lines only, a replaced
file as a new batch), and the run says what it did; `status` counts such files as pending."""
from __future__ import annotations

import json
import os

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS


def run(cfg, capsys) -> str:
    """One `cdc-assets run`; its summary line (it must succeed)."""
    code = main(["run", "--config", cfg.path])
    out = capsys.readouterr()
    assert code == 0, out
    (line,) = [x for x in out.out.splitlines() if x.startswith(tuple(f"{t.name}: " for t in cfg.tables))]
    return line


def pending_files(cfg, capsys, table: str) -> int:
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    (row,) = [r for r in map(json.loads, capsys.readouterr().out.splitlines()) if r["table"] == table]
    return row["pending_files"]


def append(cfg, table: str, rel: str, text: str) -> None:
    """A writer appending to a file it already published (the path is the file's, in place)."""
    with open(os.path.join(cfg.landing_dir(table), rel), "a", encoding="utf-8") as fh:
        fh.write(text)


def upsert(i: int, v: str) -> dict:
    return {"id": i, "v": v, "_CHANGE_TYPE": "UPSERT"}


def test_lines_appended_to_a_json_lines_file_are_applied_once_as_a_new_batch(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a"), upsert(2, "b")])})
    assert "new batch b000001" in run(cfg, capsys)
    append(cfg, "ORDERS", "b1/f.jsonl", jsonl([upsert(2, "B"), upsert(3, "c")]))
    assert pending_files(cfg, capsys, "ORDERS") == 1
    line = run(cfg, capsys)
    assert "new batch b000002 (1 file appended)" in line
    assert "2 records, 2 new changes" in line  # only the appended lines were read
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "B", 3: "c"}
    # the appended lines keep their line numbers in the file
    changes = delta_rows(cfg, "ORDERS", "changes")
    assert sorted((r["_cdc_batch_seq"], r["_cdc_line"]) for r in changes) == [(1, 1), (1, 2), (2, 3), (2, 4)]
    assert pending_files(cfg, capsys, "ORDERS") == 0
    assert "nothing new landed" in run(cfg, capsys)
    assert len(delta_rows(cfg, "ORDERS", "changes")) == 4
    append(cfg, "ORDERS", "b1/f.jsonl", "\n\n")  # blank lines: no records, and nothing wrong
    assert "(1 file appended); 0 records, 0 new changes, 0 duplicates, 0 quarantined" in run(cfg, capsys)
    append(cfg, "ORDERS", "b1/f.jsonl", jsonl([upsert(1, "A")]))
    assert "1 records, 1 new changes" in run(cfg, capsys)
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "A", 2: "B", 3: "c"}
    assert max(r["_cdc_line"] for r in delta_rows(cfg, "ORDERS", "changes")) == 7


@pytest.mark.parametrize("by_spark", [False, True], ids=["read-by-the-run", "read-by-spark-tasks"])
def test_rows_appended_to_a_csv_file_are_read_under_its_header(workdir, capsys, monkeypatch, request, by_spark):
    if by_spark:
        from cdc_assets.engine import spark_ingest
        from cdc_assets_tests.support.config import settings_of

        request.getfixturevalue("spark")
        settings_of(monkeypatch, spark_ingest, local_parse_bytes=0)  # every batch parsed by Spark tasks
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.csv": "id,v,_CHANGE_TYPE\n1,a,UPSERT\n"})
    run(cfg, capsys)
    append(cfg, "ORDERS", "b1/f.csv", "2,b,UPSERT\n1,A,UPSERT\n")
    line = run(cfg, capsys)
    assert "(1 file appended)" in line and "2 records, 2 new changes, 0 duplicates, 0 quarantined" in line
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "A", 2: "b"}
    assert sorted(r["_cdc_line"] for r in delta_rows(cfg, "ORDERS", "changes")) == [2, 3, 4]
    assert "nothing new landed" in run(cfg, capsys)


def test_a_change_file_replaced_by_other_content_is_applied_as_a_new_batch(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a"), upsert(2, "b")])})
    run(cfg, capsys)
    # the same name, written again (as a writer should: under a '.' name, then renamed): other content
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "x")])})
    assert pending_files(cfg, capsys, "ORDERS") == 1
    line = run(cfg, capsys)
    assert "new batch b000002 (1 file replaced)" in line and "1 records, 1 new changes" in line
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "x", 2: "b"}
    assert "nothing new landed" in run(cfg, capsys)


def test_the_same_content_landed_again_under_the_same_name_is_not_taken_again(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    content = jsonl([upsert(1, "a")])
    land(cfg, "ORDERS", "b1", {"f.jsonl": content})
    run(cfg, capsys)
    land(cfg, "ORDERS", "b1", {"f.jsonl": content})  # a re-delivery: a new write time, the same bytes
    assert pending_files(cfg, capsys, "ORDERS") == 0
    assert "nothing new landed" in run(cfg, capsys)


def test_a_snapshot_export_replaced_under_the_same_name_becomes_the_target(spark, workdir, capsys):
    cfg = write_config(workdir, [{"name": "ITEMS", "keys": ["id"], "format": "snapshot"}])
    land(cfg, "ITEMS", "", {"export.csv": "id,v\n1,a\n2,b\n3,c\n"})
    run(cfg, capsys)
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "b", 3: "c"}
    land(cfg, "ITEMS", "", {"export.csv": "id,v\n1,a\n2,B\n4,d\n"})  # the next day's export
    assert pending_files(cfg, capsys, "ITEMS") == 1
    assert "new batch b000002 (1 file replaced)" in run(cfg, capsys)
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "B", 4: "d"}
    # an export that grows is a whole new export too, never its added rows alone
    append(cfg, "ITEMS", "export.csv", "5,e\n")
    assert "new batch b000003 (1 file replaced)" in run(cfg, capsys)
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "B", 4: "d", 5: "e"}
    assert "nothing new landed" in run(cfg, capsys)


@pytest.mark.parametrize("cut", [b'{"id": 2, "v": "b', b'{"id": 2, "v": "b", "_CHANGE_TYPE": "UPSERT"}'])
def test_a_file_taken_while_its_last_line_was_still_being_written_gets_that_line_whole(workdir, capsys, cut):
    """A writer that does not publish by renaming: a run takes the file in the middle of its
    last line. When the rest arrives, that line is read again whole (the cut one was quarantined
    or is overridden), and the lines after it follow."""
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a")]).encode() + cut})
    run(cfg, capsys)
    whole = b'{"id": 2, "v": "b", "_CHANGE_TYPE": "UPSERT"}'
    append(cfg, "ORDERS", "b1/f.jsonl", (whole[len(cut):] + b"\n").decode() + jsonl([upsert(3, "c")]))
    assert "(1 file appended)" in run(cfg, capsys)
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "b", 3: "c"}
    assert "nothing new landed" in run(cfg, capsys)


def test_a_fifo_in_the_landing_area_is_skipped_with_a_warning_naming_it(workdir, cli):
    """Reading a FIFO blocks until something writes to it: the run would never end."""
    import subprocess

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a")])})
    os.mkfifo(os.path.join(cfg.landing_dir("ORDERS"), "b1", "pipe.jsonl"))
    # (the limit only turns a hang into a failure; the run itself takes seconds)
    done = subprocess.run([*cli, "run", "--config", cfg.path], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert "new batch b000001" in line
    assert "warning: skipped b1/pipe.jsonl: a FIFO, not a regular file" in line
    assert "ORDERS: warning: skipped b1/pipe.jsonl" in done.stderr
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a"}
    assert "b1/pipe.jsonl" not in {r["file"] for r in delta_rows(cfg, "ORDERS", "batches")}


def test_a_file_whose_name_is_not_utf8_is_quarantined_by_its_escaped_name_and_the_others_apply(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"good.jsonl": jsonl([upsert(1, "a")])})
    folder = os.path.join(os.fsencode(cfg.landing_dir("ORDERS")), b"b1")
    with open(os.path.join(folder, b"caf\xe9.jsonl"), "wb") as fh:
        fh.write(jsonl([upsert(2, "b")]).encode())
    line = run(cfg, capsys)
    assert "new batch b000001" in line and "1 quarantined" in line
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a"}
    (q,) = delta_rows(cfg, "ORDERS", "quarantine")
    assert q["_cdc_file"] == "b1/caf\\xe9.jsonl"
    assert "name is not valid UTF-8" in q["_cdc_reason"]
    assert "nothing new landed" in run(cfg, capsys)  # taken once, like any file
    land(cfg, "ORDERS", "b2", {"next.jsonl": jsonl([upsert(3, "c")])})
    assert "new batch b000002" in run(cfg, capsys)
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 3: "c"}


def gz(text: str | bytes) -> bytes:
    import gzip

    return gzip.compress(text.encode() if isinstance(text, str) else text)


def test_a_line_past_the_line_limit_in_a_gz_file_is_quarantined_and_the_lines_before_it_apply(
        workdir, capsys, monkeypatch):
    monkeypatch.setenv("CDC_ASSETS_MAX_LINE_BYTES", "1000")
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    endless = b'{"id": 3, "v": "' + b"x" * 100_000  # a writer that never ends its line
    land(cfg, "ORDERS", "b1", {"f.jsonl.gz": gz(jsonl([upsert(1, "a"), upsert(2, "b")]).encode() + endless),
                               "g.jsonl": jsonl([upsert(4, "d")])})
    line = run(cfg, capsys)
    assert "4 records, 3 new changes, 0 duplicates, 1 quarantined" in line
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "b", 4: "d"}
    (q,) = delta_rows(cfg, "ORDERS", "quarantine")
    assert (q["_cdc_file"], q["_cdc_line"]) == ("b1/f.jsonl.gz", 3)
    assert "longer than 1000 bytes once decompressed" in q["_cdc_reason"]
    assert "CDC_ASSETS_MAX_LINE_BYTES" in q["_cdc_reason"]


def test_a_gz_file_past_the_decompressed_limit_is_read_up_to_it_and_the_rest_quarantined(
        workdir, capsys, monkeypatch):
    monkeypatch.setenv("CDC_ASSETS_MAX_DECOMPRESSED_BYTES", "2000")
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    records = [upsert(i, "v" * 20) for i in range(1, 201)]  # about 10 KB once decompressed
    land(cfg, "ORDERS", "b1", {"f.jsonl.gz": gz(jsonl(records))})
    run(cfg, capsys)
    taken = values(target_rows(cfg, "ORDERS"), "id", "v")
    (q,) = delta_rows(cfg, "ORDERS", "quarantine")
    assert 0 < len(taken) < 200 and sorted(taken) == list(range(1, len(taken) + 1))
    assert (q["_cdc_file"], q["_cdc_line"]) == ("b1/f.jsonl.gz", len(taken) + 1)
    assert "more than 2000 bytes once decompressed" in q["_cdc_reason"]
    assert "CDC_ASSETS_MAX_DECOMPRESSED_BYTES" in q["_cdc_reason"]


def test_decompression_holds_no_more_than_its_limits_whatever_the_ratio():
    """A small file of one endless line: decompression stops once the line passes the limit, it
    does not inflate the file first."""
    from cdc_assets.core.formats import Limits, gunzip

    bomb = gz(b"0" * 50_000_000)  # 50 MB of one line, about 50 KB compressed
    data, (line, why) = gunzip(bomb, Limits(line_bytes=4096, decompressed_bytes=10**12))
    assert (data, line) == (b"", 1) and "longer than 4096 bytes" in str(why)
    data, (line, why) = gunzip(gz(b"a\n" * 5_000_000), Limits(line_bytes=4096, decompressed_bytes=10_000))
    assert len(data) <= 10_000 and data.endswith(b"\n") and line == data.count(b"\n") + 1


def test_a_misspelt_landing_folder_is_a_warning_naming_the_path_on_the_line_and_on_stderr(workdir, capsys):
    land(write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}]),
         "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a")])})  # where the files really are
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}],
                       landing=str(workdir / "landnig"))
    assert main(["run", "--config", cfg.path]) == 0  # the first files may not have arrived: not a failure
    out = capsys.readouterr()
    said = f"warning: landing folder {workdir / 'landnig' / 'ORDERS'} does not exist (nothing taken)"
    assert f"ORDERS: ok; {said}" in out.out
    assert f"ORDERS: {said}" in out.err


def test_the_landing_sensor_registers_an_appended_file_as_run_does(workdir, capsys, caplog):
    import logging

    from cdc_assets.defs.sensors import register_landed

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([upsert(1, "a")])})
    run(cfg, capsys)
    append(cfg, "ORDERS", "b1/f.jsonl", jsonl([upsert(2, "b")]))
    os.mkfifo(os.path.join(cfg.landing_dir("ORDERS"), "b1", "pipe"))
    log = logging.getLogger("test.sensor")
    with caplog.at_level(logging.WARNING, logger="test.sensor"):
        registered = register_landed(cfg, cfg.table("ORDERS"), None, log)
    assert registered.batch is not None and registered.batch.taken_as() == "1 file appended"
    assert "table ORDERS: skipped b1/pipe: a FIFO, not a regular file" in caplog.text
    assert "(1 file appended)" not in run(cfg, capsys)  # the sensor's batch, which this run applies
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "b"}
    assert sorted(r["_cdc_line"] for r in delta_rows(cfg, "ORDERS", "changes")) == [1, 2]
