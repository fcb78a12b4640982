"""Screenshots of the Dagster UI on the demo's result, taken in a real browser (issue 10).

    .venv/bin/cdc-assets demo --dir /tmp/uidemo
    # add `history: true` to CUSTOMERS in /tmp/uidemo/cdc.yaml, then
    .venv/bin/cdc-assets ui --config /tmp/uidemo/cdc.yaml --port 3917 --no-spark &
    # turn CUSTOMERS__landing_sensor on and land a CUSTOMERS batch: the sensor ingests and applies
    # it, and the automation sensor then builds the history; then
    python -m cdc_assets_tests.ui.screenshots http://127.0.0.1:3917 docs/screenshots

It needs Debian's chromium (`apt-get install chromium`) and Playwright's Python package in the
interpreter that runs it (`pip install playwright`; `playwright install` cannot download browsers
here, so the system chromium is launched). Neither is in the project's lock: this is a manual
check of what the UI shows, not a test. It prints, per page, whether the texts it looks for are
on it; look at the pictures too.
"""
from __future__ import annotations

import sys

# chromium's own network chatter is refused on this machine's closed network (FIELD_NOTES)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = [  # name, path, viewport height, texts the page should show
    ("automation", "/automation", 900, ["landing_sensor", "maintenance_schedule", "cdc_automation_sensor"]),
    # a table with `history: true` whose history Declarative Automation keeps current
    ("history_automation", "/assets/CUSTOMERS/history?view=automation", 1100, ["Requested", "Not requested"]),
    # the latest evaluation that requested a run, opened: which part of the condition held
    ("history_evaluation", "/assets/CUSTOMERS/history?view=automation", 1100, ["after its upstream updated"]),
    ("asset_graph", "/locations/cdc_assets.definitions/asset-groups/ORDERS", 900, ["changes", "staging", "target"]),
    ("target_overview", "/assets/PAYMENTS/target", 2000, ["Row count", "Columns", "key column"]),
    ("target_events", "/assets/PAYMENTS/target?view=events", 1300, ["dagster/row_count", "dagster/uri"]),
    ("target_plots", "/assets/PAYMENTS/target", 2600, ["dagster/row_count"]),
]


def main(base: str, out: str) -> int:
    from playwright.sync_api import sync_playwright

    missing = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page()
        for name, path, height, texts in PAGES:
            page.set_viewport_size({"width": 1400, "height": height})
            page.goto(base + path)
            for _ in range(3):  # a first visit may open Dagster's newsletter dialog
                page.wait_for_timeout(2500)
                skip = page.get_by_role("button", name="Skip")
                if skip.count():
                    skip.first.click()
            if name == "target_plots":
                page.get_by_role("button", name="Plots").first.click()
                page.wait_for_timeout(3000)
            if name == "history_evaluation":
                page.locator("tr").filter(has=page.get_by_text("Requested", exact=True)).first.locator("button").first.click()
                page.wait_for_timeout(3000)
            page.screenshot(path=f"{out}/{name}.png")
            body = page.inner_text("body")
            absent = [t for t in texts if t not in body]
            missing += len(absent)
            print(f"{name}: {out}/{name}.png" + (f"; missing {absent}" if absent else "; every text shown"))
        browser.close()
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1].rstrip("/"), sys.argv[2]))
