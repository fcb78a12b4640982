"""Figure files say the commit that measured them and whether its tree had uncommitted changes, and
docs/figures takes none from such a tree unless forced: the docs name a commit for each figure."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from cdc_assets_tests.figures import FORCE_ENV, DirtyTree, Figures, measured_at


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    root = tmp_path / "repo"
    (root / "docs" / "figures").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "code.py")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "code")
    return root


def test_a_clean_tree_writes_its_commit(repo):
    path = Figures(str(repo / "docs" / "figures"), repo=str(repo)).write_json("f.json", {"n": 1}, command="measure")
    data = json.loads(open(path).read())
    assert (data["commit"], data["dirty"], data["n"]) == (git(repo, "rev-parse", "--short", "HEAD"), False, 1)
    assert "uncommitted" not in data
    assert measured_at(str(repo)) == f"at commit `{data['commit']}`"


def test_docs_figures_refuse_a_tree_with_uncommitted_changes_before_anything_is_measured(repo):
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(DirtyTree, match=r"uncommitted changes \(code\.py\).*--force-dirty"):
        Figures(str(repo / "docs" / "figures" / "sub"), repo=str(repo))
    assert not (repo / "docs" / "figures" / "sub").exists()
    assert measured_at(str(repo)).startswith("on a tree with uncommitted changes at commit `")


@pytest.mark.parametrize("how", ["flag", "environment", "elsewhere"])
def test_a_forced_or_elsewhere_write_from_a_dirty_tree_says_so(repo, tmp_path, monkeypatch, how):
    (repo / "code.py").write_text("x = 2\n")
    if how == "environment":
        monkeypatch.setenv(FORCE_ENV, "1")
    folder = tmp_path / "out" if how == "elsewhere" else repo / "docs" / "figures"
    path = Figures(str(folder), force=how == "flag", repo=str(repo)).write_json("f.json", {}, command="measure")
    data = json.loads(open(path).read())
    assert data["dirty"] is True and data["uncommitted"] == ["code.py"]
    assert data["commit"] == git(repo, "rev-parse", "--short", "HEAD")


def test_a_tree_that_becomes_dirty_during_the_measurement_is_refused_and_the_figures_kept(repo):
    figures = Figures(str(repo / "docs" / "figures"), repo=str(repo))
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(DirtyTree, match="this measurement's figures were written to (\\S+)") as e:
        figures.write_json("f.json", {"n": 7}, command="measure")
    assert not (repo / "docs" / "figures" / "f.json").exists()
    kept = str(e.value).rsplit("written to ", 1)[1]
    assert json.loads(open(f"{kept}/f.json").read())["n"] == 7
    shutil.rmtree(kept)
    with pytest.raises(DirtyTree):
        figures.path("f.md")


@pytest.mark.parametrize("module", ["bench", "capture", "continuous", "growth", "imports", "latency", "operations",
                                    "parallel", "record", "soak"])
def test_every_figure_writing_benchmark_takes_the_force_flag(module, capsys, monkeypatch):
    import importlib
    import sys

    main = importlib.import_module(f"cdc_assets_tests.benchmarks.{module}").main
    monkeypatch.setattr(sys, "argv", [module, "--help"])  # soak's main reads sys.argv
    with pytest.raises(SystemExit) as e:
        main(["--help"]) if module != "soak" else main()
    assert e.value.code == 0 and "--force-dirty" in capsys.readouterr().out


def test_a_measurement_writes_all_its_files_over_the_committed_ones_it_replaces(repo):
    """A benchmark writes several files (JSON, then a table, a CSV, a chart) over committed ones: its
    own writes are the measurement, not uncommitted code, so none of them is refused."""
    figures_dir = repo / "docs" / "figures"
    for name in ("f.json", "f.md", "f.csv"):
        (figures_dir / name).write_text("before\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "docs")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "figures")
    figures = Figures(str(figures_dir), repo=str(repo))
    data = json.loads(open(figures.write_json("f.json", {"n": 2}, command="measure")).read())
    assert data["dirty"] is False
    with open(figures.path("f.md"), "w") as fh:
        fh.write("after\n")
    figures.write_csv("f.csv", ["n"], [[2]])
    assert (figures_dir / "f.md").read_text() == "after\n"
    # a change to anything else than what it wrote still refuses
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(DirtyTree, match=r"\(code\.py\)"):
        figures.path("g.md")


def test_the_writers_of_one_measurement_in_several_processes_refuse_none_of_each_others_files(repo, tmp_path):
    """Under pytest-xdist each worker has its own writer: a figure one worker wrote over its committed
    file is, to the others, part of the measurement (the ledger they share), not uncommitted code."""
    figures_dir = repo / "docs" / "figures"
    for name in ("a.json", "b.json"):
        (figures_dir / name).write_text("before\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "docs")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "figures")
    ledger = str(tmp_path / "ledger.txt")
    first = Figures(str(figures_dir), repo=str(repo), ledger=ledger)
    first.write_json("a.json", {"n": 1}, command="measure")
    # the second worker starts after the first wrote, and writes after it too
    second = Figures(str(figures_dir), repo=str(repo), ledger=ledger)
    data = json.loads(open(second.write_json("b.json", {"n": 2}, command="measure")).read())
    assert data["dirty"] is False and "uncommitted" not in data
    assert json.loads(open(first.write_json("a.json", {"n": 3}, command="measure")).read())["dirty"] is False
    # without the shared ledger, the other's file is a change it did not make
    with pytest.raises(DirtyTree, match=r"\(docs/figures/a\.json, docs/figures/b\.json\)"):
        Figures(str(figures_dir), repo=str(repo))
