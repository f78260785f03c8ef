"""The dataset browser in a real browser: Debian's Chromium, headless, driven by Selenium.

A dataset of real images (JPEG and PNG files encoded by Pillow, each of its
own size), JSON, text and arrays, served by ``shardcat serve`` under
uvicorn on 127.0.0.1. What the page shows is checked in the browser's own
terms: an image rendered is one whose ``naturalWidth`` is the file's width
(not an ``<img>`` in the HTML), the grid holds the keys a prefix or a SQL
filter selects, a sample's page its entries and its history. A second
dataset, 'dots', holds the keys ``.`` and ``..`` (which no URL path can
carry), a sample whose text was damaged in its shard and an image that is
not one. A screenshot of each view is kept under
``$SHARDCAT_TEST_ARTIFACTS`` (default ``.cache/test-artifacts``).
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
    """A SQLite catalog with datasets 'pics' (two versions, version 1 tagged 'first') and 'dots'
    (one damaged sample), served with the page on loopback: anonymously, with tokens, and
    anonymously under the root path /data."""
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
            if shard == 0:
                cat.dataset("pics").tag(cat.info("pics").version, "first")
        token = create_token(cat, datasets=["pics"], expires="1d", name="page").token
        brief = create_token(cat, datasets=["pics"], expires="1d", name="brief").token

        cat.create_dataset("dots", str(folder / "dots"))
        path = folder / "dots" / "dots-000000.shard"
        with shardcat.ShardWriter(str(path)) as w:
            w.add(".", {"txt": "one dot", "json": {"dots": 1}})
            w.add("..", {"txt": "two dots"})
            w.add("bad-image", {"png": b"these bytes are not a PNG", "txt": "a broken picture"})
            w.add("broken", {"txt": "DAMAGED-IN-ITS-SHARD", "png": _image(3, "PNG")})
        cat.register_shard("dots", w.close())
        # One byte of one sample's text changed after registering: its CRC32C no longer matches.
        data = path.read_bytes()
        at = data.index(b"DAMAGED")
        path.write_bytes(data[:at] + b"X" + data[at + 1 :])

    servers = {}
    threads = []
    # "small" answers at most 1000 bytes: a page's batch (24 samples' JSON and text) is over it.
    for mode in ("anonymous", "token", "rooted", "small"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = ServeConfig(
            catalogs=(("main", url),),
            host="127.0.0.1",
            port=port,
            allow_anonymous=mode != "token",
            root_path="/data" if mode == "rooted" else "",
            sql=True,
            token_cache_seconds=0,  # a revoked token is refused at once
            max_response_bytes=1000 if mode == "small" else 64 * 1024**2,
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
            "rooted": servers["rooted"][1],
            "small": servers["small"][1],
            "secret": token,
            "brief": brief,
            "url": url,
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
    """The images under ``selector`` once there are some and every one has loaded (or failed).

    Some, not merely all complete: a grid's cards can be drawn before their images are
    put in them (with a token, each image is fetched with it first), and ``all`` of none
    is true."""

    def loaded(d: Any) -> bool:
        images = d.execute_script(_IMAGES, selector)
        return bool(images) and all(i["complete"] for i in images)

    _until(driver, loaded, "images still loading")
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
    rows = {
        r.get_attribute("data-dataset"): r
        for r in browser.find_elements("css selector", "#datasets tbody tr")
    }
    assert sorted(rows) == ["dots", "pics"]
    assert "29" in rows["pics"].text  # its samples
    # A tag is shown as a name pointing at a version number, not as a version label.
    assert rows["pics"].find_element("css selector", "td.tags").text == "first → 1"
    assert browser.find_element("id", "who").text == "anonymous"
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

    # A statement that writes is refused by the catalog's read-only runner, shown as its error
    # above the grid: the search box and the SQL box (holding the statement) stay.
    _open(browser, f"{base}/ui/dataset?d=pics&sql={quote('DELETE FROM records')}")
    error = browser.find_element("css selector", "#notes .error")
    assert error.get_attribute("data-error") not in ("", None)
    assert _grid_keys(browser) == []
    assert browser.find_element("id", "prefix").is_displayed()
    assert browser.find_element("id", "sql").get_attribute("value") == "DELETE FROM records"


def test_the_sql_box_says_what_its_query_returned(served, browser):
    base = served["anonymous"]
    _open(browser, f"{base}/ui/dataset?d=pics")
    box = browser.find_element("id", "sql")
    assert box.get_attribute("placeholder") == (
        "SELECT key FROM live_records WHERE dataset = 'pics' AND key LIKE 'prefix%'"
    )
    note = browser.find_element("id", "sql-note").text
    assert "live_records is the latest version" in note
    assert "records_at WHERE version = 2 reads version 2" in note

    # No 'key' column: said, not guessed from the first column.
    query = "SELECT dataset FROM live_records"
    _open(browser, f"{base}/ui/dataset?d=pics&sql={quote(query)}")
    error = browser.find_element("css selector", "#notes .error")
    assert "the query returned no 'key' column: select key" in error.text
    assert _grid_keys(browser) == []

    # More rows than a page: the first 24 are shown, and the page says they are the first.
    query = "SELECT key FROM live_records WHERE dataset = 'pics' ORDER BY key"
    _open(browser, f"{base}/ui/dataset?d=pics&sql={quote(query)}")
    assert browser.find_element("id", "rows").text == "the first 24 of the rows"
    assert _grid_keys(browser) == sorted([*KEYS, ODD_KEY])[:24]

    # One row, in the singular; at version 1 the note names version 1's rows.
    query = "SELECT key FROM live_records WHERE dataset = 'pics' AND key = 'cam1/0003'"
    _open(browser, f"{base}/ui/dataset?d=pics&v=1&sql={quote(query)}")
    assert browser.find_element("id", "rows").text == "1 row"
    assert _grid_keys(browser) == ["cam1/0003"]
    assert "records_at WHERE version = 1 reads version 1" in (
        browser.find_element("id", "sql-note").text
    )
    assert _script_errors(browser) == []


def test_an_older_version_is_said_and_kept_by_the_search(served, browser):
    base = served["anonymous"]
    _open(browser, f"{base}/ui/dataset?d=pics&v=1")
    summary = browser.find_element("id", "summary").text
    assert summary.startswith("15 samples in 1 shard,")
    assert summary.endswith("; version 1 (latest is 2)")
    assert _grid_keys(browser) == sorted([*KEYS, ODD_KEY][:15])

    # A tag: the counts are its version's, and the dropdown selects that version's number (not
    # "latest"), so that searching keeps reading it.
    _open(browser, f"{base}/ui/dataset?d=pics&v=first")
    assert browser.find_element("id", "summary").text.endswith(
        "; version 1, tag first (latest is 2)"
    )
    select = browser.find_element("id", "version")
    assert select.get_attribute("value") == "1"
    options = [o.text for o in select.find_elements("tag name", "option")]
    assert options[0] == "latest (2)"
    assert options[-1].startswith("1 · ") and options[-1].endswith(" · tags: first")
    browser.find_element("id", "prefix").send_keys("cam1/001")
    browser.find_element("css selector", "#search button").click()
    _until(browser, lambda d: "prefix=cam1" in d.current_url, "the search's URL")
    _until(browser, lambda d: d.execute_script("return document.body.dataset.ready"), "search")
    assert "v=1" in browser.current_url
    assert browser.find_element("id", "version").get_attribute("value") == "1"
    assert _grid_keys(browser) == [f"cam1/{i:04d}" for i in range(10, 14)]

    # No version asked for: the latest, by its number.
    _open(browser, f"{base}/ui/dataset?d=pics")
    assert browser.find_element("id", "summary").text.endswith("; the latest version (2)")
    assert browser.find_element("id", "version").get_attribute("value") == ""


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
    # The version read is said by its number, the latest one too.
    summary = browser.find_element("id", "summary").text
    assert summary == "pics, the latest version (2); 4 entries"
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

    # At a tag: its version's number is said, and is the history's row in bold.
    _open(browser, f"{base}/ui/sample?d=pics&k={quote(key, safe='')}&v=first")
    summary = browser.find_element("id", "summary").text
    assert summary == "pics, version 1, tag first (latest is 2); 4 entries"
    assert browser.find_element("css selector", "#history strong").text == "v1"
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


def test_a_broken_sample_is_its_cards_error_and_keys_no_path_carries_work(served, browser_log):
    browser = browser_log
    base = served["anonymous"]
    _open(browser, f"{base}/ui/dataset?d=dots")
    assert _grid_keys(browser) == [".", "..", "bad-image", "broken"]
    _until(
        browser,
        lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('#grid .card'))"
            ".every(c => c.dataset.status)"
        ),
        "every card answered",
    )
    assert browser.find_element("id", "summary").text.startswith("4 samples in 1 shard,")
    cards = {
        c.get_attribute("data-key"): c for c in browser.find_elements("css selector", "#grid .card")
    }
    # The damaged sample is its card's error; the others, and the page around them, stay.
    error = cards["broken"].find_element("css selector", ".error")
    assert error.get_attribute("data-error") == "ChecksumError"
    assert "could not read this sample" in error.text
    assert cards["broken"].get_attribute("data-status") == "error"
    assert "one dot" in cards["."].text and "two dots" in cards[".."].text
    assert browser.find_element("id", "prefix").is_displayed()
    assert browser.find_elements("id", "pager")
    # An image the browser cannot decode is a note, not a broken-image icon.
    _until(
        browser,
        lambda d: cards["bad-image"].find_elements("css selector", '[data-failed="image"]'),
        "the failed image's note",
    )
    note = cards["bad-image"].find_element("css selector", '[data-failed="image"]')
    assert note.text == "could not load this image"
    assert cards["bad-image"].find_elements("tag name", "img") == []
    _screenshot(browser, "broken-sample")

    # "." and "..": a URL path cannot carry them (the browser resolves them away), the batch
    # endpoint's body can.
    for key, text in ((".", "one dot"), ("..", "two dots")):
        _open(browser, f"{base}/ui/sample?d=dots&k={quote(key, safe='')}")
        assert browser.find_element("tag name", "h1").text == key
        entries = browser.find_element("id", "entries")
        assert text in entries.text
        count = "2 entries" if key == "." else "1 entry"
        summary = browser.find_element("id", "summary").text
        assert summary == f"dots, the latest version (1); {count}"
    _screenshot(browser, "dot-dot")

    _open(browser, f"{base}/ui/sample?d=dots&k=broken")
    error = browser.find_element("css selector", ".error")
    assert error.get_attribute("data-error") == "ChecksumError"
    assert browser.find_elements("css selector", "#history tbody tr")  # the page stays whole
    assert _script_errors(browser) == []


def test_a_refused_batch_is_said_above_the_grid_which_stays(served, browser):
    _open(browser, f"{served['small']}/ui/dataset?d=pics")
    error = browser.find_element("css selector", "#notes .error")
    assert error.get_attribute("data-error") == "RequestTooLargeError"
    assert "ask for fewer keys" in error.text
    # The page around it stays: the search, the cards with their keys (saying they got no
    # answer), the pager.
    assert browser.find_element("id", "prefix").is_displayed()
    assert _grid_keys(browser) == sorted([*KEYS, ODD_KEY])[:24]
    statuses = browser.execute_script(
        "return Array.from(document.querySelectorAll('#grid .card')).map(c => c.dataset.status)"
    )
    assert statuses == ["missing"] * 24
    assert browser.find_element("id", "next").is_displayed()
    _screenshot(browser, "batch-refused")


def test_a_missing_sample_is_the_apis_error_not_a_blank_page(served, browser):
    _open(browser, f"{served['anonymous']}/ui/sample?d=pics&k=no-such-key")
    error = browser.find_element("css selector", ".error")
    assert "no-such-key" in error.text


def test_a_server_with_tokens_asks_for_one_then_images_load_with_it(served, browser):
    base = served["token"]
    browser.delete_all_cookies()
    _open(browser, f"{base}/ui/dataset?d=pics")
    form = browser.find_element("id", "signin")
    # Why: the 401's own message, styled as an error.
    reason = browser.find_element("css selector", "#signin-reason .error")
    assert reason.text.startswith("this server needs a token")
    assert browser.find_element("id", "who").text == "not signed in"
    browser.find_element("id", "token").send_keys("not-a-token")
    form.find_element("tag name", "button").click()
    _until(
        browser,
        lambda d: "unknown token" in d.find_element("id", "signin-reason").text,
        "refused",
    )
    assert browser.find_elements("css selector", "#signin-reason .error")

    browser.find_element("id", "token").clear()
    browser.find_element("id", "token").send_keys(served["secret"])
    browser.find_element("css selector", "#signin button").click()
    _until(browser, lambda d: len(_grid_keys(d)) == 24, "the grid after signing in")
    images = _rendered(browser)
    assert len(images) == 24 and all(i["width"] > 0 for i in images)
    # The token went into an HttpOnly cookie: the page's script cannot read it.
    assert browser.execute_script("return document.cookie") == ""
    # Who is signed in; a token scoped to datasets may not run SQL, so no SQL box.
    assert browser.find_element("id", "signed-in").text == "signed in as page"
    assert browser.find_elements("id", "sql") == []
    assert "null" not in browser.find_element("id", "main").text.split("\n")  # nothing in its place
    _screenshot(browser, "signed-in")

    # Signing out forgets the cookie: the server asks for a token again.
    browser.find_element("id", "signout").click()
    _until(browser, lambda d: d.find_elements("id", "signin"), "the sign-in form again")
    assert "this server needs a token" in browser.find_element("id", "signin-reason").text


def test_a_revoked_token_says_so_on_the_sign_in_form(served, browser):
    from shardcat.serve.tokens import revoke

    base = served["token"]
    browser.delete_all_cookies()
    _open(browser, f"{base}/ui/")
    browser.find_element("id", "token").send_keys(served["brief"])
    browser.find_element("css selector", "#signin button").click()
    _until(browser, lambda d: d.find_elements("id", "datasets"), "the datasets once signed in")
    assert browser.find_element("id", "signed-in").text == "signed in as brief"

    try:
        with Catalog(served["url"]) as cat:
            revoke(cat, "brief")
        _open(browser, f"{base}/ui/")
        main = browser.find_element("id", "main").text
        assert browser.find_elements("css selector", "#signin-reason .error"), main
        reason = browser.find_element("css selector", "#signin-reason .error")
        assert reason.text.startswith("token 'brief' is revoked")
        _screenshot(browser, "revoked")
    finally:
        browser.delete_all_cookies()  # cookies are per host, not per port: the next test's too


def test_the_root_path_comes_from_the_servers_meta_tag(served, browser):
    # A proxy that strips /data sends this process /ui/: the page's URL no longer holds the
    # root path, the server's <meta name="shardcat-root"> does.
    browser.delete_all_cookies()
    _open(browser, f"{served['rooted']}/ui/")
    assert browser.execute_script("return API") == "/data/api/v1"
    rows = browser.find_elements("css selector", "#datasets tbody tr")
    main = browser.find_element("id", "main").text
    assert sorted(r.get_attribute("data-dataset") for r in rows) == ["dots", "pics"], main


def test_a_narrow_window_does_not_scroll_sideways(served, browser):
    base = served["anonymous"]
    query = "SELECT key FROM live_records WHERE dataset = 'pics' AND key LIKE 'cam2/%'"
    views = {
        "narrow-datasets": f"{base}/ui/",
        "narrow-grid": f"{base}/ui/dataset?d=pics&sql={quote(query)}",
        "narrow-sample": f"{base}/ui/sample?d=pics&k={quote(ODD_KEY, safe='')}",
    }
    browser.set_window_size(420, 900)
    try:
        for name, url in views.items():
            _open(browser, url)
            # The grid's batch has answered (lazy images below the fold may never load here).
            _until(
                browser,
                lambda d: d.execute_script(
                    "return Array.from(document.querySelectorAll('#grid .card'))"
                    ".every(c => c.dataset.status)"
                ),
                "every card answered",
            )
            wide = browser.execute_script(
                "const e = document.documentElement; return [e.scrollWidth, e.clientWidth]"
            )
            assert wide[0] <= wide[1], (name, wide)
            _screenshot(browser, name)
    finally:
        browser.set_window_size(1280, 1000)
