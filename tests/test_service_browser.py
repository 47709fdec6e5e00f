"""The live map at ``/`` in a real headless Chromium (Debian's chromium + chromium-driver,
driven by Selenium): load the page, create subscriptions through the API, publish a
matching object, see it on the page, save a screenshot in the test's output folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("starlette")
webdriver = pytest.importorskip("selenium.webdriver")

from test_service import Server  # noqa: E402

SETUP = Path(__file__).with_name("system_setup.sh")


def _chromium() -> tuple[str, str]:
    """Paths of chromium and chromedriver, installed by the setup script if missing; the test
    is skipped (with the reason) only when they cannot be installed."""
    def found():
        return shutil.which("chromium"), shutil.which("chromedriver")

    browser, driver = found()
    if not (browser and driver):
        p = subprocess.run(["sh", str(SETUP)], capture_output=True, text=True, timeout=900)
        browser, driver = found()
        if not (browser and driver):
            pytest.skip(f"chromium could not be installed by {SETUP.name}: {(p.stderr or p.stdout).strip()[-300:]}")
    return browser, driver


@pytest.fixture
def chrome():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver = _chromium()
    opts = Options()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(driver), options=opts)
    yield d
    d.quit()


def test_the_map_shows_subscriptions_objects_and_notifications(tmp_path, chrome) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    srv = Server(tmp_path / "data", window="count:100", index="grid").start()
    try:
        c = srv.client()
        chrome.get(f"{srv.url}/#key={srv.key}")
        wait = WebDriverWait(chrome, 20)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "1")
        assert "key=" not in chrome.current_url  # the key leaves the address bar
        r = c.post("/v1/subscriptions", {"id": "r1", "kind": "range", "rect": [-10, 35, 30, 60],
                                         "keywords": ["jazz"], "t": 1})
        k = c.post("/v1/subscriptions", {"id": "k1", "kind": "knn", "x": 2.35, "y": 48.85, "k": 3,
                                         "keywords": ["jazz", "cafe"], "t": 1})
        assert r.status == k.status == 201
        sub = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '#subs rect.sub[data-id="\\"r1\\""]'))
        assert float(sub.get_attribute("width")) == 40
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '#subs path.sub.knn[data-id="\\"k1\\""]'))
        assert c.post("/v1/objects", {"id": "o1", "x": 2.34, "y": 48.86, "text": "Late jazz at the cafe",
                                      "t": 2}).json() == {"seq": 3}
        dot = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '#objs circle.obj[data-id="\\"o1\\""]'))
        wait.until(lambda d: "matched" in dot.get_attribute("class"))
        assert abs(float(dot.get_attribute("cx")) - 2.34) < 1e-9 and abs(float(dot.get_attribute("cy")) + 48.86) < 1e-9
        # the notifications were shown, the kNN result is listed and linked to the object
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#notes li")) >= 2)
        notes = [li.text for li in chrome.find_elements(By.CSS_SELECTOR, "#notes li")]
        assert '{"sub":"r1","t":2,"object":"o1"}' in notes
        assert '{"sub":"k1","t":2,"added":["o1"],"removed":[]}' in notes
        wait.until(lambda d: '"o1"' in d.find_element(By.CSS_SELECTOR, '#sublist li[data-id="\\"k1\\""]').text)
        assert len(chrome.find_elements(By.CSS_SELECTOR, "#links line.link")) == 1
        assert chrome.find_element(By.ID, "count-subs").text == "2"
        wait.until(lambda d: d.find_element(By.ID, "m-events").text == "3")  # counters from /metrics
        shot = tmp_path / "map.png"
        assert chrome.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
        logs = [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
        assert not logs, logs  # no script error, nothing refused by the page's CSP
    finally:
        srv.stop()
