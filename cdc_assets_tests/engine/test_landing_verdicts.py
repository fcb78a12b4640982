"""What a long-lived process (a sensor's daemon) remembers of touched files stays bounded, and a
file's verdict is still right after it was forgotten."""
from __future__ import annotations

from cdc_assets.engine import landing
from cdc_assets.engine.landing import APPENDED, REPLACED, Landed, Part, changed_files, digest


def test_a_daemon_touching_many_files_remembers_a_bounded_number_of_verdicts(tmp_path, monkeypatch):
    monkeypatch.setattr(landing, "VERDICTS_KEPT", 8)
    monkeypatch.setattr(landing, "_verdicts", landing.OrderedDict())
    landing_dir = tmp_path / "landing"
    landing_dir.mkdir()
    taken, listing, kinds = {}, {}, {}
    for i in range(30):
        name = f"b{i}/f.jsonl"
        (landing_dir / f"b{i}").mkdir()
        first = b'{"id": 1}\n'
        (landing_dir / name).write_bytes(first)
        taken[name] = Part(name, 0, len(first), stamp="1", digest=digest(str(landing_dir / name), len(first)))
        # a third written again with the same bytes, a third appended to, a third replaced
        now = first if i % 3 == 0 else first + b'{"id": 2}\n' if i % 3 == 1 else b'{"id": 9}\n{"id": 8}\n'
        (landing_dir / name).write_bytes(now)
        listing[name] = Landed(len(now), stamp="2")
        kinds[name] = None if i % 3 == 0 else APPENDED if i % 3 == 1 else REPLACED
    want = {f: k for f, k in kinds.items() if k is not None}
    for _tick in range(3):
        assert changed_files(str(landing_dir), listing, taken, appendable=lambda f: True) == want
        assert len(landing._verdicts) <= 8
