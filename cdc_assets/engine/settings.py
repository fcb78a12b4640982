"""The environment variables cdc_assets reads, in one place, typed.

`settings()` reads them when called: a step asks at the moment it decides, so a variable set by a
test, or by a parent process for the runs it starts, holds from then on, not only from the next
import. The configuration page of the documentation shows `reference()` as written here (a test
holds the page equal to it, and finds no CDC_ASSETS_ variable in the code that is not here);
`python -m cdc_assets.engine.settings` prints it.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ..core.config import ConfigError

PREFIX = "CDC_ASSETS_"


class SettingError(ConfigError):
    """An environment variable holds a value of the wrong kind."""


def _whole_number(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingError(f"{name}={text!r}: a whole number is needed") from None


def _knob(default, env: str, meaning: str, parse=lambda name, text: text, shown: str | None = None):
    """A setting: its variable (after the prefix), what it means, how its text is read, its default
    as the documentation shows it."""
    return dataclasses.field(default=default, metadata={"env": PREFIX + env, "meaning": meaning, "parse": parse,
                                                        "shown": shown})


@dataclasses.dataclass(frozen=True)
class Settings:
    config: str | None = _knob(
        None, "CONFIG",
        "The `cdc.yaml` the code location `cdc_assets.definitions` loads (`dagster dev`, `cdc-assets ui`).",
        shown="`./cdc.yaml`")
    spark_master: str | None = _knob(
        None, "SPARK_MASTER",
        "The Spark master a driver of cdc_assets' own starts with (`spark://host:7077`); over `spark.master` "
        "under `spark:` in `cdc.yaml`.")
    local_parse_bytes: int = _knob(
        32 * 2**20, "LOCAL_PARSE_BYTES",
        "A batch's files (or an export's) of at most this many bytes are parsed in the run's own process; "
        "larger ones by Spark tasks, which then also drop a change batch's re-deliveries, admit its column types "
        "and write its `changes` (the run's process holds only rejections, counts and column types). 0 sends "
        "every one to Spark.", _whole_number, "32 MiB")
    local_apply_rows: int = _knob(
        1_000_000, "LOCAL_APPLY_ROWS",
        "An incremental apply of at most this many staged changes (a snapshot batch: of a table of at most this "
        "many rows; a truncate: of at most this many rows in the files it cuts in part, on a partial-update "
        "table also the rows ranking above it, and in the history the versions it closes) runs in the run's own "
        "process; a larger one on Spark executors. A batch of more changes than this (counted from the `changes` "
        "log's statistics) is staged by Spark tasks. 0 sends every one to Spark.", _whole_number, "1,000,000")
    local_build_rows: int = _knob(
        10_000_000, "LOCAL_BUILD_ROWS",
        "An import, a first build, a rebuild or a whole-table key check of at most this many rows runs in the "
        "run's own process; a larger one on Spark executors. 0 sends every one to Spark.", _whole_number, "10,000,000")
    max_line_bytes: int = _knob(
        16 * 2**20, "MAX_LINE_BYTES",
        "A line of a landed text file (a JSON or CSV record) of more bytes is quarantined, naming its file and "
        "line; in a compressed file, decompression stops there (the lines before it are read, the rest of the "
        "file is quarantined as that line), so a file of one endless line never fills the memory.",
        _whole_number, "16 MiB")
    max_decompressed_bytes: int = _knob(
        2**30, "MAX_DECOMPRESSED_BYTES",
        "A compressed landed file (`.gz`) is decompressed up to this many bytes, a block at a time: past them "
        "the rest of the file is quarantined as the line where it stopped (a Parquet or Avro file: as a whole). "
        "It bounds the memory a small file can take once decompressed.", _whole_number, "1 GiB")
    crash_at: str | None = _knob(
        None, "CRASH_AT",
        "`<point>[@<n>][:TERM]`: the process kills itself (SIGKILL; SIGTERM with `:TERM`) the n-th time it "
        "reaches a named crash point, for the crash tests; see [Reliability](reliability.md).")
    debug: bool = _knob(
        False, "DEBUG",
        "Any value but empty: `cdc-assets run` prints a failed table's traceback on stderr besides its root "
        "cause.", lambda name, text: True)

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> Settings:
        """The settings `environ` holds; an unset or empty variable leaves the default."""
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            text = environ.get(f.metadata["env"], "")
            if text != "":
                values[f.name] = f.metadata["parse"](f.metadata["env"], text)
        return cls(**values)  # type: ignore[arg-type]


def settings() -> Settings:
    """The settings as the environment holds them now."""
    return Settings.of(os.environ)


def variables() -> list[str]:
    """The names of the environment variables, in the order of `reference()`."""
    return [f.metadata["env"] for f in dataclasses.fields(Settings)]


def variable(setting: str) -> str:
    """The environment variable of a setting: `variable("config")` is `CDC_ASSETS_CONFIG`."""
    return next(f.metadata["env"] for f in dataclasses.fields(Settings) if f.name == setting)


def reference() -> str:
    """The documentation's table of the environment variables."""
    lines = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for f in dataclasses.fields(Settings):
        default = f.metadata["shown"] or ("unset" if f.default in (None, False) else f"`{f.default}`")
        lines.append(f"| `{f.metadata['env']}` | {default} | {f.metadata['meaning']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
