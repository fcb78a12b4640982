"""The documentation: the site builds in strict mode (no broken link, anchor or page left out of its
navigation), and the README stays short and points at pages that exist."""
from __future__ import annotations

import os
import re
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


def test_every_cdc_assets_command_the_docs_show_parses():
    from cdc_assets.cli.main import parse_arguments  # as the program parses them: tables after options too

    commands = []
    for page, body in _blocks("bash"):
        for line in body.splitlines():
            line = line.split("  #")[0].strip()
            if re.match(r"^(\S*/)?cdc-assets ", line):
                commands.append((page, line.split()[1:]))
    assert len(commands) >= 3
    for page, argv in commands:
        try:
            parse_arguments(argv)
        except SystemExit as e:
            raise AssertionError(f"{page}: cdc-assets {' '.join(argv)} does not parse") from e


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
