"""The shared conformance suite (../shared/conformance/run_conformance.py) driven with one part
of the setup moved elsewhere (a landing area in a bucket, a warehouse in an object store): its
own functions load the scenarios, write cdc.yaml, read and compare the targets, so a variant
never carries a copy of the comparison."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from collections.abc import Callable

import pytest


def load_suite(shared_dir: str):
    path = os.path.join(shared_dir, "conformance", "run_conformance.py")
    if not os.path.isfile(path):
        pytest.skip(f"{path} is absent")
    spec = importlib.util.spec_from_file_location("run_conformance", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Conformance:
    """The suite's scenarios in one config under `work`, with `overrides` (landing, warehouse)
    replacing the suite's own settings."""

    def __init__(self, cli: list[str], shared_dir: str, work: str, names: list[str], **overrides):
        self.cli, self.work = cli, work
        self.suite = load_suite(shared_dir)
        self.scenarios = self.suite.load_scenarios(os.path.join(shared_dir, "conformance", "scenarios"), names)
        assert sorted(s["name"] for s in self.scenarios) == sorted(names)
        self.cfg_path = os.path.join(work, "cdc.yaml")
        self.cfg = self.suite.write_config(self.cfg_path, work, self.scenarios)
        self.cfg.update(overrides)
        with open(self.cfg_path, "w") as fh:
            json.dump(self.cfg, fh, indent=2)
        # the work folder's own Dagster instance, beside its cdc.yaml; emulator settings come from the fixtures' environment
        self.env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}

    def run(self, label: str) -> None:
        t = time.time()
        p = subprocess.run(self.cli + ["run", "--config", self.cfg_path], cwd=self.work, env=self.env,
                           capture_output=True, text=True, timeout=900)
        print(f"# {label}: exit {p.returncode} in {time.time() - t:.1f}s")
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-25:])
        assert p.returncode == 0, f"{label} exited {p.returncode}:\n{tail}"

    def land_and_run_every_batch(self, land: Callable[[dict, str], None]) -> None:
        """Batch N of every scenario landed by `land(scenario, batch)`, then one run, as the suite does."""
        for b in range(max(len(s["batches"]) for s in self.scenarios)):
            for s in self.scenarios:
                if b < len(s["batches"]):
                    land(s, s["batches"][b])
            self.run(f"run after batch {b + 1}")

    def assert_targets_expected_then_rerun_changes_nothing(self) -> None:
        versions, failures = {}, {}
        for s in self.scenarios:
            versions[s["name"]], rows, schema = self.suite.read_target(self.cfg, s["table"]["name"])
            failures[s["name"]] = self.suite.compare(s, rows) + self.suite.type_problems(s, schema)
        assert failures == {s["name"]: [] for s in self.scenarios}, failures
        self.run("idempotence run (nothing new)")
        for s in self.scenarios:
            v, _, _ = self.suite.read_target(self.cfg, s["table"]["name"])
            assert v == versions[s["name"]], f"{s['name']}: a run with nothing new changed the target " \
                                             f"(version {versions[s['name']]} -> {v})"
