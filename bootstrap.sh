#!/usr/bin/env bash
# Set up everything cdc_assets needs, then run the demo or the tests.
#   ./bootstrap.sh demo   set up, then generate a feed for three tables, apply it and reconcile
#   ./bootstrap.sh test   set up, then run the test suite in up to two processes (extra arguments go to pytest)
#   ./bootstrap.sh lint   set up, then run ruff and mypy as configured in pyproject.toml (CI runs it first)
# Idempotent: a second call finds the venv current and only runs.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'bootstrap: %s\n' "$*" >&2; }

find_python() {
    for p in "${PYTHON:-}" python3.11 python3.12 python3; do
        [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 || continue
        if "$p" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)'; then
            echo "$p"; return 0
        fi
    done
    say "Python 3.11 or 3.12 is needed (set PYTHON=/path/to/python3.11)"; exit 1
}

java_major() {
    command -v java >/dev/null 2>&1 || { echo 0; return; }
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

ensure_java() {
    local major; major=$(java_major)
    if [ "${major:-0}" -ge 17 ]; then return; fi
    say "Spark needs Java 17 or newer (found: ${major:-none}); installing Debian's openjdk-17-jre-headless"
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    say "installed $(java -version 2>&1 | head -n1)"
}

# The tests start a throw-away PostgreSQL cluster (cdc_assets_tests/postgres.py) from Debian's server.
ensure_postgresql() {
    if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then return; fi
    say "the PostgreSQL source's tests need a PostgreSQL server; installing Debian's postgresql"
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
    say "installed $(ls -d /usr/lib/postgresql/*/bin | head -n1)"
}

ensure_venv() {
    local stamp=.venv/.bootstrap-stamp want
    want=$(cat pyproject.toml requirements.lock | sha1sum | cut -d' ' -f1)
    if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return; fi
    local py; py=$(find_python)
    [ -x .venv/bin/python ] || { say "creating .venv with $py"; "$py" -m venv .venv; }
    say "installing the pinned dependencies into .venv (about a minute the first time)"
    .venv/bin/python -m pip install -q --disable-pip-version-check uv==0.13.8
    # Bytecode compiled at install: every `cdc-assets` process, and each Dagster run, imports Dagster,
    # which otherwise compiles from source whenever bytecode is not written (PYTHONDONTWRITEBYTECODE).
    # Without uv's cache: PySpark comes as a source archive that uv builds anew at each install, and
    # each build (1.4 GB unpacked) stayed in the cache, which filled the disk after enough installs.
    .venv/bin/uv pip install -q --no-cache --compile-bytecode --python .venv/bin/python -r requirements.lock -e ".[test]"
    echo "$want" > "$stamp"
}

cmd=${1:-}
[ -n "$cmd" ] && shift || true
case "$cmd" in
    demo|test|lint) ;;
    *) echo "usage: ./bootstrap.sh demo | test [pytest args] | lint" >&2; exit 2 ;;
esac
ensure_java
[ "$cmd" = test ] && ensure_postgresql
ensure_venv
export PYSPARK_PYTHON="$PWD/.venv/bin/python" SPARK_LOCAL_IP=127.0.0.1
case "$cmd" in
    demo) exec .venv/bin/cdc-assets demo "$@" ;;
    test)
        # Two test processes (pytest-xdist; `-n auto` is one per core, at most two: conftest.py)
        # unless the arguments choose: `-n 0` runs in this one process (for -s, or a debugger).
        # A run writing figures is one process: a figure is measured with no test beside it.
        case " $* " in
            *" -n"*|*" --numprocesses"*) ;;
            *" --figures"*) set -- -n 0 "$@" ;;
            *) set -- -n auto "$@" ;;
        esac
        exec .venv/bin/python -m pytest -p no:cacheprovider "$@" ;;
    lint) .venv/bin/ruff check cdc_assets cdc_assets_tests && exec .venv/bin/mypy cdc_assets ;;
esac
