"""`cdc-assets`: init, run, status, capture, read, quarantine, history, restore, maintain, rekey, generate, demo, ui, spark."""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import traceback

from ..core.config import ConfigError
from ..core.errors import CdcError
from ..engine.settings import settings
from . import capture, demo, generate, init, maintain, quarantine, read, rekey, run, spark, status, ui, versions
from .common import MORE_NAMES, TRY_AGAIN


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-assets", description=__doc__)
    parser.add_argument("--version", action="version",
                        version=f"cdc-assets {importlib.metadata.version('cdc_assets')}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (init, run, status, capture, read, quarantine, versions, maintain, rekey, generate, demo, ui, spark):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command of `argv`, returning its exit status. Without `argv` this is the `cdc-assets`
    program itself (sys.argv): it ends the process with the command's status (end_process)."""
    if argv is None:
        end_process(lambda: _command(None, console=True))
    return _command(argv)




def exit_status(error: CdcError) -> int:
    """A command's exit status for an error it did not handle itself: 2 when cdc.yaml is wrong (as for
    bad arguments), 75 when running the command again may succeed, 1 otherwise."""
    if isinstance(error, ConfigError):
        return 2
    return TRY_AGAIN if error.retryable else 1


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command's arguments, as argparse parses them, but that the names argparse leaves over
    past an option go to the command's list of tables (common.add_tables); an option no command
    knows is refused as argparse refuses it."""
    parser = build_parser()
    args, left = parser.parse_known_args(argv)
    # after `--` every argument is a name, as argparse reads it
    ended = left.index("--") if "--" in left else len(left)
    unknown = [a for a in left[:ended] if a.startswith("-")]
    names = left[:ended] + left[ended + 1:]
    more = getattr(args, MORE_NAMES, None)
    if unknown or (names and more is None):
        parser.error(f"unrecognized arguments: {' '.join(unknown or names)}")
    if more is not None:
        getattr(args, more).extend(names)
    return args


def _command(argv: list[str] | None, console: bool = False) -> int:
    args = parse_arguments(argv)
    args.console = console  # the process is the command's own: it may take its signals (run, demo)
    try:
        settings()  # a variable of the wrong kind stops the command before it does anything
        return int(args.func(args) or 0)
    except CdcError as e:  # the root cause in one line, not a traceback
        print(f"cdc-assets {args.command}: {e}", file=sys.stderr)
        return exit_status(e)


def end_process(command) -> None:
    """End the process with the status the callable `command` returns.

    The status is the command's own: after the output is flushed and a Spark session this process
    started is stopped, the process ends at once, before interpreter teardown, where native threads
    (the JVM bridge, delta-rs' runtime, gRPC) torn down mid-flight could abort it (`terminate called
    without an active exception`, status 134) after a command had passed; it also saves the
    second that teardown takes."""
    try:
        status = command()
    except SystemExit as e:  # argparse's usage errors (2), --version and --help (0)
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # noqa: BLE001 - shown as Python would, then the status Python gives
        traceback.print_exc()
        status = 1
    _stop_spark()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe leaves nothing to flush
            pass
    os._exit(status if isinstance(status, int) and 0 <= status < 256 else 1)


def _stop_spark() -> None:
    """Stop an in-process Spark session (its JVM ends with this process); a Spark Connect server
    is not this process's to stop."""
    if "pyspark.sql.session" not in sys.modules:
        return
    try:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    except Exception as e:  # noqa: BLE001 - the command's status stands; the JVM ends with the process
        print(f"cdc-assets: stopping Spark: {type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
