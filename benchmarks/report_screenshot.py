"""Open a run's report.html in headless Chromium, check it, and take a screenshot.

    python benchmarks/report_screenshot.py results/default   # -> build/report-check/report_screenshot.png
                                                             #    and build/report-check/explorer.png
                                                             # (never into the results folder: its files are tracked)

Needs Debian's chromium + chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) and
selenium (test extra). Checks: the page has the stage tables (metrics, recall ceiling,
labels, confidence intervals, significance) and every embedded image has loaded; then the
per-query explorer: the query table is filled, clicking a query shows each stage's top 10 side
by side with grade badges, and a screenshot of the explorer is taken.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHROME = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,3000")  # fmt: skip


def check_explorer(driver, shot: Path) -> dict:
    """Pick the first query of the explorer's table (as a user would, by clicking it) and check the view."""
    from selenium.webdriver.support.ui import WebDriverWait

    rows = driver.find_elements("css selector", "#qx-table tbody tr")
    assert rows, "the explorer's query table is empty"
    n_stages = len(driver.find_elements("css selector", "#qx-table thead th[data-k^='v']"))
    qid = rows[0].get_attribute("data-q")
    driver.execute_script("arguments[0].scrollIntoView()", rows[0])
    rows[0].click()
    WebDriverWait(driver, 10).until(lambda d: len(d.find_elements("css selector", "#qx-detail .qx-stage")) == n_stages)
    columns = driver.find_elements("css selector", "#qx-detail .qx-stage")
    shown = [len(c.find_elements("css selector", "ol li")) for c in columns]
    badges = driver.find_elements("css selector", "#qx-detail .badge")
    assert all(n > 0 for n in shown), f"a stage shows no documents: {shown}"
    assert len(badges) >= sum(shown), "every shown document carries a grade badge"
    labels = sorted({b.text for b in badges})
    header = driver.find_element("css selector", "#qx-detail h3").text
    assert qid in header, header
    detail = driver.find_element("id", "qx-detail")
    driver.execute_script("arguments[0].scrollIntoView()", detail)
    assert detail.screenshot(str(shot)), "explorer screenshot failed"
    # the filter and the sort work on the table
    box = driver.find_element("id", "qx-filter")
    box.send_keys(qid)
    left = driver.find_elements("css selector", "#qx-table tbody tr")
    assert left and all(qid in r.text for r in left), "the filter keeps only matching queries"
    return {"query": qid, "stages": [c.get_attribute("data-stage") for c in columns], "shown": shown,
            "badges": labels, "explorer_screenshot": str(shot)}  # fmt: skip


def check_report(html: Path, screenshot: Path, explorer_shot: Path | None = None) -> dict:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROME)
    for flag in FLAGS:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    try:
        driver.get(Path(html).resolve().as_uri())
        table_ids = [t.get_attribute("id") for t in driver.find_elements("css selector", "table")]
        for needed in ("stage", "recall", "top-10", "significance"):
            assert needed in table_ids, f"{html}: table {needed!r} missing (has {table_ids})"
        assert "headroom captured" in driver.find_element("id", "recall").text
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])"
        )
        assert images, f"{html}: no images"
        for alt, done, w, h in images:
            assert done and w > 100 and h > 100, f"{html}: image {alt} did not render ({w}x{h})"
        assert driver.save_screenshot(str(screenshot)), "screenshot failed"
        out = {"tables": table_ids, "images": [i[0] for i in images], "screenshot": str(screenshot)}
        if explorer_shot is not None:
            out["explorer"] = check_explorer(driver, explorer_shot)
        return out
    finally:
        driver.quit()


def missing() -> str | None:
    """What this check needs and this machine lacks, in one line (None: nothing)."""
    lacking = [str(p) for p in (CHROME, DRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        lacking.append("the selenium package")
    if lacking:
        return (f"report-check needs a headless browser: {', '.join(lacking)} not found (apt-get install chromium "
                "chromium-driver; pip install selenium, the test extra)")  # fmt: skip
    return None


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/default")
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "build/report-check")
    why = missing()
    if why:
        print(f"report_screenshot: {why}", file=sys.stderr)
        raise SystemExit(2)
    if not (folder / "report.html").is_file():
        print(f"report_screenshot: {folder / 'report.html'}: no such file (run the folder's config first)", file=sys.stderr)
        raise SystemExit(2)
    out.mkdir(parents=True, exist_ok=True)
    info = check_report(folder / "report.html", out / "report_screenshot.png", out / "explorer.png")
    x = info["explorer"]
    print(f"{folder / 'report.html'}: {len(info['tables'])} tables, images {', '.join(info['images'])} rendered; "
          f"screenshot {info['screenshot']}; explorer: query {x['query']}, stages {', '.join(x['stages'])}, "
          f"{sum(x['shown'])} documents with badges {', '.join(x['badges'])}; screenshot {x['explorer_screenshot']}")  # fmt: skip
