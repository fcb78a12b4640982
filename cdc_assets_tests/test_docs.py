"""The documentation: the site builds in strict mode (no broken link, anchor or page left out of its
navigation), and the README stays short and points at pages that exist."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_documentation_site_builds_strictly(tmp_path):
    mkdocs = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").exists()


def test_the_readme_is_short_and_its_links_lead_to_files():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    assert len(text.splitlines()) <= 150
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to its documentation"
    missing = [t for t in local if not os.path.exists(os.path.join(REPO, t))]
    assert missing == []


def test_the_configuration_page_lists_every_key_as_config_validates_them():
    from cdc_assets.core import config
    from cdc_assets.core.config_keys import reference

    with open(os.path.join(REPO, "docs", "configuration.md"), encoding="utf-8") as fh:
        text = fh.read()
    shown = text.split("<!-- generated: ", 1)[1].split("-->\n", 1)[1].split("<!-- end of generated keys -->")[0]
    assert shown == reference()
    listed = set(re.findall(r"^\| `([^`]+)`", shown, re.M))
    accepted = ({k for k in config.TOP_KEYS} | {f"tables[].{k}" for k in config.TABLE_KEYS}
                | {f"tables[].apply.{k}" for k in config.APPLY_KEYS}
                | {f"tables[].maintenance.{k}" for k in config.MAINTENANCE_KEYS}
                | {f"tables[].publish.{k}" for k in config.PUBLISH_KEYS}
                | {f"tables[].options.{k}" for k in config.CHANGESET_OPTIONS})
    assert accepted <= listed


def test_the_configuration_page_lists_every_environment_variable_as_settings_reads_them():
    from cdc_assets.engine.settings import reference, variables

    with open(os.path.join(REPO, "docs", "configuration.md"), encoding="utf-8") as fh:
        text = fh.read()
    shown = text.split("<!-- generated: `python -m cdc_assets.engine.settings`", 1)[1].split("-->\n", 1)[1]
    assert shown.split("<!-- end of generated variables -->")[0] == reference()
    assert re.findall(r"^\| `(CDC_ASSETS_[A-Z_]+)`", shown, re.M) == variables()


def _blocks(language: str) -> list[tuple[str, str]]:
    """(page, body) of every fenced block in `language` in the README and the documentation pages."""
    pages = ["README.md"] + sorted(os.path.join("docs", p) for p in os.listdir(os.path.join(REPO, "docs"))
                                   if p.endswith(".md"))
    out = []
    for page in pages:
        with open(os.path.join(REPO, page), encoding="utf-8") as fh:
            out += [(page, body) for body in re.findall(rf"```{language}\n(.*?)```", fh.read(), re.S)]
    return out


def test_every_whole_cdc_yaml_the_docs_show_is_valid(tmp_path):
    from cdc_assets.core.config import load_config

    whole = [(page, body) for page, body in _blocks("yaml")
             if re.search(r"^warehouse:", body, re.M) and re.search(r"^tables:", body, re.M)]
    assert len(whole) >= 3
    for i, (page, body) in enumerate(whole):
        path = tmp_path / f"cdc-{i}.yaml"
        path.write_text(body)
        assert load_config(str(path)).tables, page


def _pages() -> list[str]:
    """The README and every Markdown page under docs/ (the figures' pages too)."""
    pages = ["README.md"]
    for folder, _, files in sorted(os.walk(os.path.join(REPO, "docs"))):
        pages += sorted(os.path.relpath(os.path.join(folder, f), REPO) for f in files if f.endswith(".md"))
    return pages


# A fenced block (any language, indented in a list too) and an inline code span (CommonMark: closed by
# a run of as many backticks as opened it, so `` a ` b `` is one span).
_FENCE = re.compile(r"^[ \t]*(```+|~~~+)([^\n]*)\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_PROGRAM = re.compile(r"^(\S*/)?cdc-assets$")
_SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1"}


def _command_lines() -> list[tuple[str, list[str]]]:
    """(page, argv after `cdc-assets`) of every `cdc-assets` command line in a fenced block of the
    docs, whatever the block's language: `$ ` prompts, `VAR=value` prefixes, comments, `\\`
    continuations and what follows a pipe or `&&` are the shell's, not the command's."""
    out = []
    for page in _pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as fh:
            text = fh.read()
        for fence in _FENCE.finditer(text):
            if fence.group(2).strip() in ("mermaid", "yaml", "python", "json"):
                continue
            for line in fence.group(3).replace("\\\n", " ").splitlines():
                try:
                    words = shlex.split(line.strip().removeprefix("$ "), comments=True)
                except ValueError:
                    continue
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    words = words[1:]
                if words and _PROGRAM.match(words[0]):
                    argv = words[1:]
                    cut = [i for i, w in enumerate(argv) if w in _SHELL_OPERATORS]
                    out.append((page, argv[:cut[0]] if cut else argv))
    return out


def _named_commands() -> list[tuple[str, str]]:
    """(page, words after `cdc-assets`) of every command the docs name in an inline code span,
    in running text, lists and tables: `cdc-assets history TABLE --config cdc.yaml [--json]`, or a
    quoted message's `... Run cdc-assets rekey TABLE once`."""
    out = []
    for page in _pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as fh:
            prose = _FENCE.sub("", fh.read())
        for span in _SPAN.finditer(prose):
            for m in re.finditer(r"(?:^|[\s/])cdc-assets\s+(\S.*)", " ".join(span.group(2).split())):
                out.append((page, m.group(1)))
    return out


def _placeholder(word: str) -> bool:
    """A word standing for a value: TABLE, N, FILE.parquet|FILE.csv, `...`."""
    return "..." in word or bool(re.fullmatch(r"[A-Z][A-Z0-9_.|-]*", word))


def _misnamed(words: str, parser) -> str | None:
    """Why `cdc-assets WORDS` names no command of `parser` (a subcommand, an action or an option
    that does not exist), or None. Placeholders and optional parts (`[--json]`) are allowed."""
    import argparse

    tokens = [t for t in (w.strip("[](),;:").rstrip(".") for w in words.split()) if t]
    if not tokens:
        return "no subcommand"
    if tokens[0].startswith("-"):
        return None if tokens[0] in parser._option_string_actions else f"no option {tokens[0]}"
    command, name, rest = parser, "cdc-assets", tokens
    while True:  # down the subcommands (and a subcommand's own subcommands) the words name
        chosen = [a for a in command._actions if not a.option_strings and a.choices]
        if not chosen or not rest or rest[0].startswith("-") or _placeholder(rest[0]):
            break
        wrong = [c for c in rest[0].split("|") if c not in chosen[0].choices]
        if wrong:
            kind = "command" if command is parser else f"{name} action"
            return f"no {kind} {'|'.join(wrong)!r} (the choices: {', '.join(chosen[0].choices)})"
        if not isinstance(chosen[0], argparse._SubParsersAction) or "|" in rest[0]:
            rest = rest[1:]
            break
        command, name, rest = chosen[0].choices[rest[0]], rest[0], rest[1:]
    if command is parser:
        return "no subcommand"
    for t in rest:
        for option in t.split("|"):
            option = option.split("=")[0]
            if option.startswith("-") and option not in command._option_string_actions:
                return f"no option {option} of {name}"
    return None


def test_every_cdc_assets_command_the_docs_show_parses():
    from cdc_assets.cli.main import parse_arguments  # as the program parses them: tables after options too

    commands = _command_lines()
    assert len(commands) >= 8
    for page, argv in commands:
        try:
            parse_arguments(argv)
        except SystemExit as e:
            raise AssertionError(f"{page}: cdc-assets {' '.join(argv)} does not parse") from e


def test_every_cdc_assets_command_the_docs_name_exists():
    """Each `cdc-assets ...` of the docs' text names a command, action and options the command line
    has: a page that names `cdc-assets versions` sends its reader to a command that does not exist."""
    from cdc_assets.cli.main import build_parser

    parser = build_parser()
    named = _named_commands()
    assert len(named) >= 40
    wrong = [f"{page}: `cdc-assets {words}`: {why}" for page, words in named + [(p, " ".join(a)) for p, a in _command_lines()]
             if (why := _misnamed(words, parser))]
    assert wrong == []


def test_a_misnamed_command_is_told_from_the_docs_usage_forms():
    from cdc_assets.cli.main import build_parser

    parser = build_parser()
    assert _misnamed("versions", parser) and _misnamed("history TABLE --jsn", parser)
    assert _misnamed("capture enable|stop [TABLE ...]", parser) and _misnamed("--versions", parser)
    assert _misnamed("TABLE", parser) and _misnamed("run --tabel T", parser)
    for usage in ("history TABLE --config cdc.yaml [--json]", "capture enable|disable|status|check [TABLE ...]",
                  "restore TABLE --config cdc.yaml --version N | --as-of 2026-11-24T09:30:00Z", "--version",
                  "read TABLE --config cdc.yaml [--out FILE.parquet|FILE.csv] [--with-metadata]"):
        assert _misnamed(usage, parser) is None, usage
    # a subcommand with subcommands of its own: each level's words and options are its own
    import argparse

    nested = argparse.ArgumentParser(prog="cdc-assets")
    inner = nested.add_subparsers().add_parser("quarantine").add_subparsers()
    inner.add_parser("list").add_argument("--json", action="store_true")
    inner.add_parser("replay").add_argument("--dry-run", action="store_true")
    assert _misnamed("quarantine replay TABLE [--dry-run]", nested) is None
    assert _misnamed("quarantine list|replay TABLE", nested) is None
    assert _misnamed("quarantine list TABLE --dry-run", nested) and _misnamed("quarantine show TABLE", nested)


def _benchmark_commands() -> list[tuple[str, str, list[str]]]:
    """(page, module, argv) of every `python -m cdc_assets_tests.benchmarks.NAME ...` the docs show,
    in code spans and fenced blocks: the commands that write the figures the docs quote."""
    out = []
    for page in _pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as fh:
            text = fh.read()
        lines = [line for fence in _FENCE.finditer(text) for line in fence.group(3).replace("\\\n", " ").splitlines()]
        lines += [" ".join(span.group(2).split()) for span in _SPAN.finditer(_FENCE.sub("", text))]
        for line in lines:
            m = re.search(r"python -m (cdc_assets_tests\.benchmarks\.\w+)(.*)", line)
            if not m:
                continue
            try:
                words = shlex.split(m.group(2), comments=True)
            except ValueError as e:
                raise AssertionError(f"{page}: {line!r}: {e}") from None
            cut = [i for i, w in enumerate(words) if w in _SHELL_OPERATORS or w.startswith("`")]
            out.append((page, m.group(1), words[:cut[0]] if cut else words))
    return out


class _Parsed(Exception):
    """The command line parsed: stop before the benchmark does anything."""


def test_every_benchmark_command_the_docs_show_parses(monkeypatch, capsys):
    """The commands that write docs/figures, as the docs give them, are accepted by their scripts
    (each script's own parser, stopped once it has parsed)."""
    import argparse
    import importlib
    import signal

    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # bench.py's main takes SIGTERM
    commands = _benchmark_commands()
    assert len(commands) >= 20
    wrong = []
    for page, module, argv in commands:
        main = importlib.import_module(module).main
        monkeypatch.setattr(sys, "argv", [module, *argv])  # soak.py's main reads sys.argv
        try:
            main(argv) if main.__code__.co_argcount else main()
        except _Parsed:
            continue
        except SystemExit:
            wrong.append(f"{page}: python -m {module} {shlex.join(argv)}: {capsys.readouterr().err.strip()}")
            continue
        wrong.append(f"{page}: python -m {module} {shlex.join(argv)}: ran without parsing its arguments")
    assert wrong == []


def test_the_readme_table_runs_as_written(tmp_path, monkeypatch, capsys):
    from cdc_assets.cli.main import main
    from cdc_assets_tests.support.landing import jsonl
    from cdc_assets_tests.support.records import mysql

    [config] = [body for page, body in _blocks("yaml") if page == "README.md"]
    (tmp_path / "cdc.yaml").write_text(config)
    batch = tmp_path / "landing" / "ORDERS" / "batch-1"
    batch.mkdir(parents=True)
    (batch / "part-1.jsonl").write_text(jsonl([mysql("INSERT", {"order_id": 1, "status": "open"}, 1, 1),
                                               mysql("UPDATE", {"order_id": 1, "status": "paid"}, 1, 2)]))
    [run] = [line.split("  #")[0].split()[1:] for page, body in _blocks("bash") if page == "README.md"
             for line in body.splitlines() if "cdc-assets run " in line]
    monkeypatch.chdir(tmp_path)
    assert main(run) == 0
    from deltalake import DeltaTable

    target = DeltaTable(str(tmp_path / "warehouse" / "ORDERS" / "target")).to_pyarrow_table()
    assert target.select(["order_id", "status"]).to_pylist() == [{"order_id": 1, "status": "paid"}]


def test_the_troubleshooting_page_reads_the_quarantine_as_written(tmp_path, monkeypatch, capsys):
    from cdc_assets.cli.main import main
    from cdc_assets_tests.support.landing import jsonl
    from cdc_assets_tests.support.records import mysql

    [config] = [body for page, body in _blocks("yaml") if page == "README.md"]
    (tmp_path / "cdc.yaml").write_text(config)
    batch = tmp_path / "landing" / "ORDERS" / "batch-1"
    batch.mkdir(parents=True)
    (batch / "part-1.jsonl").write_text(jsonl([mysql("INSERT", {"order_id": 1, "status": "open"}, 1, 1)])
                                        + "{not json\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--config", "cdc.yaml"]) == 0
    [snippet] = [body for page, body in _blocks("python") if page == os.path.join("docs", "troubleshooting.md")]
    capsys.readouterr()
    exec(compile(snippet, "troubleshooting.md", "exec"), {})  # noqa: S102 - the documented snippet
    shown = capsys.readouterr().out
    assert re.search(r"^b0+1 \S*part-1\.jsonl 2 not valid JSON", shown, re.M), shown  # batch, file, line, reason
