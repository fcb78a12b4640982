"""Random landings against a reference: files are content, not names, and a wholly quarantined
batch is replayed once the configuration is fixed.

Each example draws (from one hypothesis seed, as test_random_feeds.py does) a source history per
table: changes over a few integer keys, each with its true position `seq` (the table's
`sequence_by` column), inserts, updates and deletes in any order, some delivered twice. It delivers
them over several `cdc-assets run`s (the CLI's entry point, in this process), where between runs a
landed file may be
- appended to with more changes,
- appended to with a last line cut mid-write, the line finished before the next run,
- replaced by other changes under the same name (its old changes stay delivered),
- written again with the same bytes;
and after each run the target equals `reference_model.ReferenceTable` fed every change delivered so
far (a line cut mid-write is delivered once whole), and a run after which nothing changed commits no
target version. Both JSON lines and CSV change sets are drawn (two tables, one run).

`test_random_snapshot_exports`: a `format: snapshot` table whose export is replaced (rewritten,
grown, shrunk, or the same bytes again) under its one name: the target is the latest export.

`test_random_quarantine_replay`: a feed whose first batch is wholly quarantined by a wrong `keys:`
name (the run exits 1 and says FAILED); cdc.yaml is fixed, later batches (new files, appends to any
file, the quarantined one included) apply; `cdc-assets quarantine replay` leaves the target the
reference over every change (as if the key had been right from the start); a second replay changes
nothing.

RANDOM_LANDING_EXAMPLES (default 2: CI's time; successive runs draw other examples) sets the examples of each test.
"""
from __future__ import annotations

import json
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cdc_assets.cli.main import main
from cdc_assets_tests.reference_model import DELETE, UPSERT, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import delta_version, target_rows

pytestmark = MARKS

EXAMPLES = int(os.environ.get("RANDOM_LANDING_EXAMPLES", "2"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a run costs seconds: no shrinking
                    suppress_health_check=list(HealthCheck))

OPS = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
HEADER = "seq,k,v,op\n"  # the change type last: a CSV line cut anywhere inside it has none


@dataclass(frozen=True)
class Change:
    seq: int
    k: int
    op: str  # I, U or D
    v: str

    def source_change(self) -> SourceChange:
        return SourceChange(key=(self.k,), seq=self.seq, op=DELETE if self.op == "D" else UPSERT,
                            row={"k": self.k, "v": self.v, "seq": self.seq})


def line_of(c: Change, fmt: str) -> str:
    if fmt == "csv":
        return f"{c.seq},{c.k},{c.v},{c.op}\n"
    return json.dumps({"seq": c.seq, "k": c.k, "v": c.v, "op": c.op}) + "\n"


def history(rnd: random.Random, n: int, keys: int) -> list[Change]:
    """A source's changes in the order it made them; arrival shuffles them, some twice."""
    made = [Change(seq, rnd.randint(1, keys), rnd.choices("IUD", weights=(3, 4, 2))[0], f"v{seq}")
            for seq in range(1, n + 1)]
    arrival = made + [rnd.choice(made) for _ in range(n // 5)]
    rnd.shuffle(arrival)
    return arrival


@dataclass
class Feed:
    """One table's files as landed so far, and the changes they delivered."""
    name: str
    fmt: str  # jsonl or csv
    queue: list[Change]
    files: dict[str, str] = field(default_factory=dict)  # path under the table's folder -> its text
    pending: dict[str, tuple[str, Change]] = field(default_factory=dict)  # file -> (rest of a cut line, its change)
    delivered: list[Change] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # what was done, for a failure's message

    def take(self, rnd: random.Random, least: int, most: int) -> list[Change]:
        n = min(len(self.queue), rnd.randint(least, most))
        chunk, self.queue = self.queue[:n], self.queue[n:]
        return chunk

    def text(self, chunk: list[Change]) -> str:
        return "".join(line_of(c, self.fmt) for c in chunk)

    def folder(self, cfg) -> str:
        return cfg.landing_dir(self.name)

    def publish(self, cfg, rel: str, text: str) -> None:
        """Written under a '.'-name, then renamed over the old file (a writer publishing)."""
        folder, name = os.path.split(rel)
        land(cfg, self.name, folder, {name: text})
        self.files[rel] = text

    def append(self, cfg, rel: str, text: str) -> None:
        """Appended in place, as a writer that does not publish by renaming."""
        with open(os.path.join(self.folder(cfg), rel), "a", encoding="utf-8") as fh:
            fh.write(text)
        self.files[rel] += text


def finish_cuts(feed: Feed, cfg) -> bool:
    """The writer of each file cut mid-line ends that line. Returns whether there was one."""
    cut = bool(feed.pending)
    for rel, (rest, change) in sorted(feed.pending.items()):
        feed.append(cfg, rel, rest)
        feed.delivered.append(change)
        feed.log.append(f"finish the cut line of {rel}")
    feed.pending.clear()
    return cut


def land_step(rnd: random.Random, feed: Feed, cfg, run: int, *, kinds=("new", "append", "cut", "replace", "same")
              ) -> bool:
    """Between runs: 1 to 3 random actions on the feed's files. Returns whether any content changed."""
    # a file replaced before a run read it delivered nothing: a file is replaced at most once between
    # runs, and not right after its cut line is finished (the finished line must reach a run)
    touched: set[str] = set(feed.pending)
    changed = finish_cuts(feed, cfg)
    for i in range(rnd.randint(1, 3)):
        settled = sorted(f for f in feed.files if f not in feed.pending)
        kind = rnd.choice(kinds) if settled else "new"
        if kind in ("replace", "same"):
            settled = [f for f in settled if f not in touched]
            if not settled:
                continue
        if kind != "same" and not feed.queue:
            kind = "same" if settled else None
        if kind is None:
            continue
        if kind == "new":
            chunk = feed.take(rnd, 1, 4)
            rel = f"b{run}/f{i}.{feed.fmt}"
            feed.publish(cfg, rel, (HEADER if feed.fmt == "csv" else "") + feed.text(chunk))
            feed.delivered += chunk
        elif kind == "append":
            rel = rnd.choice(settled)
            chunk = feed.take(rnd, 1, 3)
            feed.append(cfg, rel, feed.text(chunk))
            feed.delivered += chunk
        elif kind == "cut":
            rel = rnd.choice(settled)
            # at least one whole line first: a batch of only the cut line would be wholly quarantined
            chunk = feed.take(rnd, 2, 4)
            if len(chunk) < 2:
                feed.queue = chunk + feed.queue
                continue
            last = line_of(chunk[-1], feed.fmt)[:-1]
            at = rnd.randint(1, len(last) - 1)  # strictly inside the line: it is no record yet
            feed.append(cfg, rel, feed.text(chunk[:-1]) + last[:at])
            feed.pending[rel] = (last[at:] + "\n", chunk[-1])
            feed.delivered += chunk[:-1]
        elif kind == "replace":
            rel = rnd.choice(settled)
            chunk = feed.take(rnd, 1, 4)
            feed.publish(cfg, rel, (HEADER if feed.fmt == "csv" else "") + feed.text(chunk))
            feed.delivered += chunk  # the old content's changes were delivered too: they stay
        else:  # the same bytes, written again
            rel = rnd.choice(settled)
            feed.publish(cfg, rel, feed.files[rel])
            touched.add(rel)
            feed.log.append(f"run {run}: {kind} {rel}")
            continue
        changed = True
        touched.add(rel)
        feed.log.append(f"run {run}: {kind} {rel} -> {feed.files[rel]!r}")
    return changed


def expected_state(changes: list[Change]) -> dict[int, tuple[str, int]]:
    ref = ReferenceTable()
    for c in changes:
        ref.deliver(c.source_change())
    return {k: (row["v"], row["seq"]) for (k,), row in ref.state().items()}


def target_state(cfg, table: str) -> dict[int, tuple[str, int]]:
    if delta_version(cfg, table, "target") < 0:
        return {}
    return {int(r["k"]): (r["v"], int(r["seq"])) for r in target_rows(cfg, table)}


def cli_run(cfg, capsys) -> tuple[int, str]:
    code = main(["run", "--config", cfg.path])
    out = capsys.readouterr()
    return code, out.out + out.err


def changeset(name: str, fmt: str, keys=("k",)) -> dict:
    return {"name": name, "keys": list(keys), "format": "changeset", "options": OPS}


@pytest.fixture
def no_dagster_home(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


def test_random_appends_and_replacements_under_the_same_name(spark, capsys, no_dagster_home):
    @SETTINGS
    @given(seed=st.integers(0, 2 ** 32 - 1))
    def check(seed: int):
        rnd = random.Random(f"random-landing/{seed}")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "landing").mkdir()
            feeds = [Feed(f"L_{fmt.upper()}", fmt, history(rnd, rnd.randint(8, 24), rnd.randint(1, 4)))
                     for fmt in ("jsonl", "csv")]
            cfg = write_config(root, [changeset(f.name, f.fmt) for f in feeds])
            for run in range(1, rnd.randint(3, 5) + 1):
                before = {f.name: delta_version(cfg, f.name, "target") for f in feeds}
                changed = {f.name: land_step(rnd, f, cfg, run) for f in feeds}
                code, out = cli_run(cfg, capsys)
                story = "\n".join(line for f in feeds for line in f.log)
                assert code == 0, f"{out}\n{story}"
                for f in feeds:
                    assert target_state(cfg, f.name) == expected_state(f.delivered), \
                        f"{f.name} after run {run}:\n{out}\n{story}"
                    if not changed[f.name]:  # nothing, or the same bytes written again
                        assert f"{f.name}: ok; nothing new landed" in out, f"{f.name}\n{out}\n{story}"
                        assert delta_version(cfg, f.name, "target") == before[f.name], f"{f.name}\n{out}\n{story}"
            for f in feeds:  # the last cut lines end, then nothing more
                finish_cuts(f, cfg)
            code, out = cli_run(cfg, capsys)
            assert code == 0, out
            versions = {f.name: delta_version(cfg, f.name, "target") for f in feeds}
            for f in feeds:
                assert target_state(cfg, f.name) == expected_state(f.delivered), f"{f.name}\n{out}"
            for f in feeds:  # every file written again with the same bytes (a re-delivery, a copy tool)
                for rel, text in sorted(f.files.items()):
                    f.publish(cfg, rel, text)
            code, out = cli_run(cfg, capsys)
            assert code == 0 and out.count("nothing new landed") == len(feeds), out
            assert {f.name: delta_version(cfg, f.name, "target") for f in feeds} == versions

    check()


def test_random_snapshot_exports(spark, capsys, no_dagster_home):
    @SETTINGS
    @given(seed=st.integers(0, 2 ** 32 - 1))
    def check(seed: int):
        rnd = random.Random(f"random-snapshots/{seed}")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "landing").mkdir()
            cfg = write_config(root, [{"name": "S", "keys": ["k"], "format": "snapshot"}])
            export: dict[int, str] = {}
            text, story = None, []
            for run in range(1, rnd.randint(3, 5) + 1):
                before = delta_version(cfg, "S", "target")
                how = rnd.choice(["new", "grown", "same"]) if text is not None else "new"
                if how == "new":  # the next export: keys kept, changed, dropped or added
                    export = {k: f"w{run}_{k}" if rnd.random() < 0.5 else export.get(k, f"w{run}_{k}")
                              for k in rnd.sample(range(1, 9), rnd.randint(1, 6))}
                    text = "k,v\n" + "".join(f"{k},{v}\n" for k, v in export.items())
                    land(cfg, "S", "", {"export.csv": text})
                elif how == "grown":  # the export written again with more rows, in place
                    more = {k: f"g{run}_{k}" for k in rnd.sample([k for k in range(1, 40) if k not in export], 2)}
                    export.update(more)
                    text += "".join(f"{k},{v}\n" for k, v in more.items())
                    with open(os.path.join(cfg.landing_dir("S"), "export.csv"), "a", encoding="utf-8") as fh:
                        fh.write("".join(f"{k},{v}\n" for k, v in more.items()))
                else:
                    land(cfg, "S", "", {"export.csv": text})
                story.append(f"run {run}: {how} {text!r}")
                code, out = cli_run(cfg, capsys)
                assert code == 0, out
                rows = {int(r["k"]): r["v"] for r in target_rows(cfg, "S")}
                assert rows == export, f"after run {run}:\n{out}\n" + "\n".join(story)
                if how == "same":
                    assert "nothing new landed" in out and delta_version(cfg, "S", "target") == before, out

    check()


def test_random_quarantine_replay(spark, capsys, no_dagster_home):
    @SETTINGS
    @given(seed=st.integers(0, 2 ** 32 - 1))
    def check(seed: int):
        rnd = random.Random(f"random-replay/{seed}")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "landing").mkdir()
            feeds = [Feed(f"Q_{fmt.upper()}", fmt, history(rnd, rnd.randint(6, 20), rnd.randint(1, 4)))
                     for fmt in ("jsonl", "csv")]
            cfg = write_config(root, [changeset(f.name, f.fmt, keys=("kk",)) for f in feeds])  # the column is k
            first = {}
            for f in feeds:
                first[f.name] = f.take(rnd, 1, 5)
                f.publish(cfg, f"b0/f.{f.fmt}", (HEADER if f.fmt == "csv" else "") + f.text(first[f.name]))
            code, out = cli_run(cfg, capsys)
            assert code == 1 and all(f"{f.name}: FAILED" in out for f in feeds), out
            cfg = write_config(root, [changeset(f.name, f.fmt) for f in feeds])  # fixed
            for run in range(1, rnd.randint(1, 3) + 1):
                for f in feeds:
                    land_step(rnd, f, cfg, run, kinds=("new", "append"))
                code, out = cli_run(cfg, capsys)
                assert code == 0, out
                for f in feeds:
                    assert target_state(cfg, f.name) == expected_state(f.delivered), \
                        f"{f.name} after run {run}:\n{out}\n" + "\n".join(f.log)
            for f in feeds:
                code = main(["quarantine", "replay", f.name, "--config", cfg.path])
                out = capsys.readouterr().out
                story = f"first batch {first[f.name]}\n" + "\n".join(f.log)
                assert code == 0, f"{out}\n{story}"
                assert target_state(cfg, f.name) == expected_state(first[f.name] + f.delivered), f"{out}\n{story}"
                version = delta_version(cfg, f.name, "target")
                code = main(["quarantine", "replay", f.name, "--config", cfg.path])
                out = capsys.readouterr().out
                assert code == 0 and "nothing to replay" in out, out
                assert delta_version(cfg, f.name, "target") == version
                assert target_state(cfg, f.name) == expected_state(first[f.name] + f.delivered)

    check()
