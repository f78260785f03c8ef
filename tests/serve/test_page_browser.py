"""The dataset browser in a real browser: Debian's Chromium, headless, driven by Selenium.

A dataset of real images (JPEG and PNG files encoded by Pillow, each of its
own size), JSON, text and arrays, served by ``shardcat serve`` under
uvicorn on 127.0.0.1. What the page shows is checked in the browser's own
terms: an image rendered is one whose ``naturalWidth`` is the file's width
(not an ``<img>`` in the HTML), the grid holds the keys a prefix or a SQL
filter selects, a sample's page its entries and its history. A screenshot
of each view is kept under ``$SHARDCAT_TEST_ARTIFACTS`` (default
``.cache/test-artifacts``).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

import shardcat
from shardcat.reading import Catalog

pytestmark = pytest.mark.slow

IN_CI = os.environ.get("CI") == "true"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("SHARDCAT_TEST_ARTIFACTS", ".cache/test-artifacts"))

KEYS = [f"cam{c}/{i:04d}" for c in (1, 2) for i in range(14)]
ODD_KEY = "odd key/with spaces & 100%"
TIMEOUT = 30.0


def _size(i: int) -> tuple[int, int]:
    return 24 + 3 * i, 16 + 2 * i


def _image(i: int, fmt: str) -> bytes:
    from PIL import Image, ImageDraw

    w, h = _size(i)
    img = Image.new("RGB", (w, h), (40 + 7 * i % 200, 90, 160))
    ImageDraw.Draw(img).ellipse((2, 2, w - 3, h - 3), fill=(230, 200, 40))
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def _wav(seconds: float, rate: int = 8000) -> bytes:
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        t = np.arange(int(seconds * rate)) / rate
        w.writeframes((np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes())
    return out.getvalue()


def _samples() -> Iterator[tuple[str, dict[str, Any]]]:
    for n, key in enumerate([*KEYS, ODD_KEY]):
        sample: dict[str, Any] = {
            "json": {"key": key, "label": n % 3, "tags": ["a", "b"]},
            "txt": f"caption of {key}",
        }
        if n % 2:
            sample["png"] = _image(n, "PNG")
        else:
            sample["jpg"] = _image(n, "JPEG")
        if n % 7 == 0:
            sample["npy"] = np.sin(np.linspace(0, 6.28, 64, dtype=np.float32))
        if n == 5:
            sample["wav"] = _wav(1.5)  # played through Range requests
            sample["npy"] = np.arange(12 * 20, dtype=np.uint8).reshape(12, 20)  # a grey image
        yield key, sample


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A SQLite catalog with dataset 'pics' (two versions) served with the page on loopback."""
    import uvicorn

    from shardcat.serve import ServeConfig, create_app
    from shardcat.serve.tokens import create_token

    folder = tmp_path_factory.mktemp("page")
    url = f"sqlite:///{folder / 'catalog.db'}"
    with Catalog(url) as cat:
        cat.create_dataset("pics", str(folder / "pics"))
        samples = list(_samples())
        for shard, part in enumerate((samples[:15], samples[15:])):
            with shardcat.ShardWriter(str(folder / "pics" / f"pics-{shard:06d}.shard")) as w:
                for key, sample in part:
                    w.add(key, sample)
            cat.register_shard("pics", w.close())
        cat.dataset("pics").tag(cat.info("pics").version, "first")
        token = create_token(cat, datasets=["pics"], expires="1d", name="page").token

    servers = {}
    threads = []
    for mode in ("anonymous", "token"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = ServeConfig(
            catalogs=(("main", url),),
            host="127.0.0.1",
            port=port,
            allow_anonymous=mode == "anonymous",
            sql=True,
        )
        server = uvicorn.Server(
            uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        servers[mode] = (server, f"http://127.0.0.1:{port}")
        threads.append(thread)
    try:
        yield {
            "anonymous": servers["anonymous"][1],
            "token": servers["token"][1],
            "secret": token,
            "samples": dict(samples),
        }
    finally:
        for server, _ in servers.values():
            server.should_exit = True
        for thread in threads:
            thread.join(TIMEOUT)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        message = (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,1000")
    # The browser's own console: a script error of the page fails the test that caused it.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver: Any, what: Callable[[Any], Any], message: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, TIMEOUT, poll_frequency=0.05).until(what, message)


@pytest.fixture
def browser_log(browser: Any) -> Any:
    """The browser, its console emptied of earlier tests' messages."""
    browser.get_log("browser")
    return browser


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    _until(driver, lambda d: d.execute_script("return document.body.dataset.ready"), url)


def _screenshot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"serve-page-{name}.png"))


def _script_errors(driver: Any) -> list[str]:
    """The page's script errors. An API error answer (a 404 the page shows as its message) is
    logged by the browser too: those are the tests' own to check, and are left out."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]
    ]


_IMAGES = """
return Array.from(document.querySelectorAll(arguments[0])).map(img => ({
  key: img.closest('[data-key]') ? img.closest('[data-key]').dataset.key : null,
  complete: img.complete, width: img.naturalWidth, height: img.naturalHeight}));
"""


def _rendered(driver: Any, selector: str = "#grid img") -> list[dict[str, Any]]:
    """The images under ``selector`` once every one has loaded (or failed)."""
    _until(
        driver,
        lambda d: all(i["complete"] for i in d.execute_script(_IMAGES, selector)),
        "images still loading",
    )
    return list(driver.execute_script(_IMAGES, selector))


def _grid_keys(driver: Any) -> list[str]:
    return list(
        driver.execute_script(
            "return Array.from(document.querySelectorAll('#grid .card')).map(c => c.dataset.key)"
        )
    )


def _index_of(key: str) -> int:
    return [*KEYS, ODD_KEY].index(key)


def test_the_datasets_list_links_to_a_grid_whose_images_render(served, browser_log):
    browser = browser_log
    base = served["anonymous"]
    _open(browser, f"{base}/")
    rows = browser.find_elements("css selector", "#datasets tbody tr")
    assert [r.get_attribute("data-dataset") for r in rows] == ["pics"]
    assert "29" in rows[0].text  # its samples
    _screenshot(browser, "datasets")

    browser.find_element("link text", "pics").click()
    _until(browser, lambda d: d.execute_script("return document.body.dataset.ready"), "grid")
    _until(browser, lambda d: len(_grid_keys(d)) == 24, "a page of 24 samples")
    images = _rendered(browser)
    assert len(images) == 24
    for image in images:  # decoded by the browser at the file's own size
        assert (image["width"], image["height"]) == _size(_index_of(image["key"])), image
    _screenshot(browser, "grid")

    # The next page continues after the last key (the cursor), to the end.
    browser.find_element("id", "next").click()
    _until(browser, lambda d: d.execute_script("return document.body.dataset.ready"), "next")
    _until(browser, lambda d: len(_grid_keys(d)) == 5, "the last 5 samples")
    assert _grid_keys(browser) == sorted([*KEYS, ODD_KEY])[24:]
    assert all(i["width"] > 0 for i in _rendered(browser))
    assert _script_errors(browser) == []


def test_searching_by_prefix_and_filtering_by_sql(served, browser):
    base = served["anonymous"]
    _open(browser, f"{base}/ui/dataset?d=pics")
    box = browser.find_element("id", "prefix")
    box.send_keys("cam2/000")
    browser.find_element("css selector", "#search button").click()
    _until(browser, lambda d: "prefix=cam2" in d.current_url, "the search's URL")
    _until(browser, lambda d: _grid_keys(d) == [f"cam2/{i:04d}" for i in range(10)], "prefix")
    assert all(i["width"] > 0 for i in _rendered(browser))

    sql = "SELECT key FROM live_records WHERE dataset = 'pics' AND key LIKE '%3' ORDER BY key"
    browser.find_element("id", "sql").send_keys(sql)
    browser.find_element("css selector", "#filter button").click()
    want = sorted(k for k in [*KEYS, ODD_KEY] if k.endswith("3"))
    _until(browser, lambda d: _grid_keys(d) == want, "the SQL filter's keys")
    assert all(i["width"] > 0 for i in _rendered(browser))
    _screenshot(browser, "filtered")

    # A URL is shareable: the same filter opened afresh shows the same samples.
    shared = browser.current_url
    _open(browser, shared)
    _until(browser, lambda d: _grid_keys(d) == want, "the shared URL")

    # A statement that writes is refused by the catalog's read-only runner, shown as its error.
    _open(browser, f"{base}/ui/dataset?d=pics&sql={quote('DELETE FROM records')}")
    error = browser.find_element("css selector", ".error")
    assert error.get_attribute("data-error") not in ("", None)
    assert _grid_keys(browser) == []


def test_a_sample_page_shows_every_entry_its_history_and_the_command(served, browser_log):
    browser = browser_log
    base = served["anonymous"]
    key = KEYS[14]  # index 14: a JPEG, an array (14 % 7 == 0)
    _open(browser, f"{base}/ui/sample?d=pics&k={quote(key, safe='')}")
    entries = {
        e.get_attribute("data-entry"): e
        for e in browser.find_elements("css selector", "#entries .entry")
    }
    assert sorted(entries) == ["jpg", "json", "npy", "txt"]
    (image,) = _rendered(browser, "#entries img")
    assert (image["width"], image["height"]) == _size(14)
    assert '"label": 2' in entries["json"].find_element("tag name", "pre").text
    assert entries["txt"].text.endswith(f"caption of {key}")
    _until(browser, lambda d: "shape (64,)" in entries["npy"].text, "the array's summary")
    assert "<f4" in entries["npy"].text
    assert entries["npy"].find_elements("tag name", "canvas")  # its line is drawn
    for entry in entries.values():  # every entry's CRC32C is shown
        assert "crc32c " in entry.text
    assert browser.find_element("id", "command").text == f"shardcat get pics {key}"
    history = browser.find_elements("css selector", "#history tbody tr")
    assert len(history) >= 2  # the two commits (and the tag on the first)
    _screenshot(browser, "sample")

    # A key with spaces, '&' and '%' reaches its page and its command is quoted for a shell.
    _open(browser, f"{base}/ui/sample?d=pics&k={quote(ODD_KEY, safe='')}")
    assert browser.find_element("tag name", "h1").text == ODD_KEY
    assert browser.find_element("id", "command").text == f"shardcat get pics '{ODD_KEY}'"
    assert all(i["width"] > 0 for i in _rendered(browser, "#entries img"))

    # The history is newest first; the oldest version's link opens the sample as that version
    # read it, at a URL of its own. This key came with the second commit: version 1 has no such
    # sample, and says so.
    oldest = browser.find_elements("css selector", "#history tbody tr a")[-1]
    assert oldest.text == "v1"
    oldest.click()
    _until(browser, lambda d: "v=1" in d.current_url, "a version's URL")
    _until(browser, lambda d: d.execute_script("return document.body.dataset.ready"), "v1")
    assert "at version 1" in browser.find_element("css selector", ".error").text

    _open(browser, f"{base}/ui/sample?d=pics&k={quote(key, safe='')}&v=1")
    assert browser.find_element("id", "command").text == f"shardcat get pics {key} --version 1"
    assert len(_rendered(browser, "#entries img")) == 1
    assert _script_errors(browser) == []


def test_audio_plays_through_range_requests_and_a_2d_array_is_drawn(served, browser):
    _open(browser, f"{served['anonymous']}/ui/sample?d=pics&k={quote(KEYS[5], safe='')}")
    # The browser read the WAV's header through the entry's URL (Range requests) and knows
    # its length: 1.5 s.
    duration = _until(
        browser,
        lambda d: d.execute_script(
            "const a = document.querySelector('#entries audio');"
            "return a && a.readyState >= 1 ? a.duration : null"
        ),
        "the audio's metadata",
    )
    assert abs(duration - 1.5) < 0.01
    npy = browser.find_element("css selector", '#entries [data-entry="npy"]')
    _until(browser, lambda d: "shape (12, 20)" in npy.text, "the array's summary")
    size = browser.execute_script(
        "const c = arguments[0].querySelector('canvas.thumb'); return [c.width, c.height]", npy
    )
    assert size == [20, 12]  # one pixel per element


def test_a_missing_sample_is_the_apis_error_not_a_blank_page(served, browser):
    _open(browser, f"{served['anonymous']}/ui/sample?d=pics&k=no-such-key")
    error = browser.find_element("css selector", ".error")
    assert "no-such-key" in error.text


def test_a_server_with_tokens_asks_for_one_then_images_load_with_it(served, browser):
    base = served["token"]
    browser.delete_all_cookies()
    _open(browser, f"{base}/ui/dataset?d=pics")
    form = browser.find_element("id", "signin")
    browser.find_element("id", "token").send_keys("not-a-token")
    form.find_element("tag name", "button").click()
    _until(browser, lambda d: "unknown token" in d.find_element("id", "main").text, "refused")

    browser.find_element("id", "token").clear()
    browser.find_element("id", "token").send_keys(served["secret"])
    browser.find_element("css selector", "#signin button").click()
    _until(browser, lambda d: len(_grid_keys(d)) == 24, "the grid after signing in")
    images = _rendered(browser)
    assert len(images) == 24 and all(i["width"] > 0 for i in images)
    # The token went into an HttpOnly cookie: the page's script cannot read it.
    assert browser.execute_script("return document.cookie") == ""
    _screenshot(browser, "signed-in")
