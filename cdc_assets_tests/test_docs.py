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


def test_every_key_cdc_yaml_accepts_is_documented():
    from cdc_assets.core import config

    with open(os.path.join(REPO, "docs", "configuration.md"), encoding="utf-8") as fh:
        text = fh.read()
    accepted = (config.TOP_KEYS | config.TABLE_KEYS | config.APPLY_KEYS | config.MAINTENANCE_KEYS
                | config.PUBLISH_KEYS | config.CHANGESET_OPTIONS)
    undocumented = sorted(k for k in accepted if not re.search(rf"(?<![\w-]){re.escape(k)}:", text))
    assert undocumented == []
