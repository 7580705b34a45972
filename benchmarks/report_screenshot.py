"""Open a run's report.html in headless Chromium, check it, and take a screenshot.

    python benchmarks/report_screenshot.py results/default   # -> results/default/report_screenshot.png

Needs Debian's chromium + chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) and
selenium (test extra). Checks: the page has the stage tables (metrics, recall ceiling,
labels, confidence intervals, significance) and every embedded image has loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHROME = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,3000")  # fmt: skip


def check_report(html: Path, screenshot: Path) -> dict:
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
        for needed in ("stage", "recall", "top-10", "95%", "significance"):
            assert needed in table_ids, f"{html}: table {needed!r} missing (has {table_ids})"
        assert "headroom captured" in driver.find_element("id", "recall").text
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])"
        )
        assert images, f"{html}: no images"
        for alt, done, w, h in images:
            assert done and w > 100 and h > 100, f"{html}: image {alt} did not render ({w}x{h})"
        assert driver.save_screenshot(str(screenshot)), "screenshot failed"
        return {"tables": table_ids, "images": [i[0] for i in images], "screenshot": str(screenshot)}
    finally:
        driver.quit()


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/default")
    info = check_report(folder / "report.html", folder / "report_screenshot.png")
    print(f"{folder / 'report.html'}: {len(info['tables'])} tables, images {', '.join(info['images'])} rendered; "
          f"screenshot {info['screenshot']}")  # fmt: skip
