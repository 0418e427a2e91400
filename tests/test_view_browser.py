"""``sandboxlite view`` in a real browser (issue 38, item 4): Debian's headless Chromium, driven by
selenium through Debian's chromedriver, loads the page from disk.

A real run's page (the scripted model through the real CLI) shows its steps and answer; ``j``/``k``
move the current step, the search box hides the steps that do not match, a long output is folded in
a ``<details>``; a trajectory with hostile content renders it as text and runs none of it; the
browser fetches nothing but the page itself (its DevTools network log and the page's own resource
timing both say so); screenshots are saved (to $SANDBOXLITE_VIEW_SCREENSHOTS, else a temporary
folder) for a person to look at.  Nothing here is skipped: without the browser the tests fail and
say what to install (tools/setup.sh installs it all)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from urllib.parse import unquote

from sandboxlite.view import load_run, write_eval, write_html

from .test_view import HOSTILE, hostile_run, real_run  # noqa: F401 - real_run: the module-scoped fixture, shared
from .test_view_eval import real_eval, synthetic_eval  # noqa: F401 - real_eval: the module-scoped fixture, shared

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install -y --no-install-recommends chromium chromium-driver (tools/setup.sh does)"
PWN = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
HANG = 30.0  # seconds: a guard against a page that hangs the browser, not a performance target

# run in every document before its own scripts: records CSP violations and any alert()
WATCH = """
window.__csp = []; window.__alerts = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });
(function () { var a = window.alert; window.alert = function (m) { window.__alerts.push(String(m)); return a.call(window, m); }; })();
"""


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium with the DevTools network log on; a str (what to install) when it cannot start."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        yield "selenium is missing: .venv/bin/pip install selenium (the [dev] extra has it; tools/setup.sh installs it)"
        return
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        yield f"{' and '.join(missing)} missing: {INSTALL}"
        return
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    opts.unhandled_prompt_behavior = "ignore"  # an alert stays open for the test to see, not dismissed
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
        yield driver
    finally:
        driver.quit()


def chrome(browser):
    if isinstance(browser, str):
        pytest.fail(browser, pytrace=False)
    return browser


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("SANDBOXLITE_VIEW_SCREENSHOTS")
    folder = Path(where) if where else tmp_path_factory.mktemp("view-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(driver, folder: Path, name: str) -> Path:
    path = folder / name
    assert driver.save_screenshot(str(path)), path
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, (path, len(data))
    print(f"screenshot: {path} ({len(data):,} bytes)")
    return path


def requests(driver) -> list[str]:
    """The URLs the browser asked for since the last call (the DevTools performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
        elif msg["method"] == "Network.webSocketCreated":
            urls.append(msg["params"]["url"])
    return urls


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver, page: Path) -> tuple[float, list[str]]:
    """Load ``page`` from disk: the seconds it took (to the load event) and every URL requested."""
    driver.get("about:blank")
    requests(driver)  # drain what came before
    console_errors(driver)
    t0 = time.perf_counter()
    driver.get(page.resolve().as_uri())  # returns at the load event; the page renders synchronously before it
    took = time.perf_counter() - t0
    return took, requests(driver)


def assert_fetched_nothing(driver, page: Path, urls: list[str]) -> None:
    assert urls == [page.resolve().as_uri()], urls  # the page itself, nothing else (no http(s), no data fetch)
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert driver.execute_script("return window.__csp") == [], "nothing tried what the CSP forbids"
    assert console_errors(driver) == []


def visible_steps(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [s.get_attribute("id") for s in driver.find_elements(By.CSS_SELECTOR, "section.step") if s.is_displayed()]


def current_steps(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [s.get_attribute("id") for s in driver.find_elements(By.CSS_SELECTOR, "section.step.current")]


def press(driver, *keys) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(*keys).perform()


def test_a_real_run_in_chromium(browser, real_run, tmp_path, shots):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = chrome(browser)
    page = write_html(load_run(real_run), tmp_path / "real.html")
    took, urls = open_page(d, page)
    print(f"real run page: {page.stat().st_size:,} bytes, loaded in {took:.3f} s")
    assert took < HANG
    assert d.title.startswith("sandboxlite run")
    # the steps render: one section per step, all shown, none current yet
    assert visible_steps(d) == ["step-1", "step-2", "step-3", "step-4"]
    assert current_steps(d) == []
    text = d.execute_script("return document.body.innerText")
    assert "Steps (4)" in text and "print(6 * 7)" in text and "execute_bash" in text and "submit" in text
    answer = d.find_element(By.XPATH, "//h2[normalize-space()='Answer']/following-sibling::pre[1]")
    assert answer.is_displayed() and answer.text == "\\boxed{0}"
    shot(d, shots, "real-1-top.png")

    # keys: j moves down, k up, clamped at the ends; the current step is scrolled to
    press(d, "j")
    assert current_steps(d) == ["step-1"]
    press(d, "j", "j")
    assert current_steps(d) == ["step-3"]
    top = d.execute_script("return document.getElementById('step-3').getBoundingClientRect().top")
    assert 0 <= top < d.execute_script("return window.innerHeight"), top
    press(d, "k")
    assert current_steps(d) == ["step-2"]
    press(d, "j", "j", "j", "j")
    assert current_steps(d) == ["step-4"]
    press(d, "k", "k", "k", "k", "k")
    assert current_steps(d) == ["step-1"]
    press(d, "j")
    shot(d, shots, "real-2-step2-current.png")

    # search: "/" focuses the box; typing hides the steps that do not match (and j typed there moves nothing)
    search = d.find_element(By.ID, "search")
    press(d, "/")
    assert d.switch_to.active_element == search
    press(d, "echo turn")
    assert visible_steps(d) == ["step-2"] and current_steps(d) == ["step-2"]
    shot(d, shots, "real-3-search.png")
    search.send_keys(Keys.CONTROL, "a")
    search.send_keys(Keys.BACKSPACE)
    assert visible_steps(d) == ["step-1", "step-2", "step-3", "step-4"]
    search.send_keys("ZZZ-no-such-TEXT")
    assert visible_steps(d) == []
    search.send_keys(Keys.CONTROL, "a")
    search.send_keys("STR_REPLACE_EDITOR")  # case-insensitive
    assert visible_steps(d) == ["step-3"]
    press(d, Keys.ESCAPE)  # leaves the box: keys move steps again, among the visible ones
    assert d.switch_to.active_element != search
    press(d, "j")
    assert current_steps(d) == ["step-3"]

    # nothing fetched, at load or since
    assert_fetched_nothing(d, page, urls)
    assert requests(d) == []


def test_a_long_output_is_folded_in_chromium(browser, real_run, tmp_path, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    d = chrome(browser)
    run = tmp_path / "long"
    shutil.copytree(real_run, run, symlinks=True)
    t = json.loads((run / "trajectory.json").read_text())
    t["steps"][0]["observations"][0]["output"] = "\n".join(f"line {i}" for i in range(200))
    (run / "trajectory.json").write_text(json.dumps(t))
    page = write_html(load_run(run), tmp_path / "long.html")
    took, urls = open_page(d, page)
    print(f"long-output page: loaded in {took:.3f} s")
    step = d.find_element(By.ID, "step-1")
    folded = step.find_elements(By.CSS_SELECTOR, "details")
    assert len(folded) == 1
    summary = folded[0].find_element(By.TAG_NAME, "summary")
    out = folded[0].find_element(By.TAG_NAME, "pre")
    assert "lines" in summary.text and summary.is_displayed()
    assert not out.is_displayed() and "line 150" not in step.text  # folded: not shown until clicked
    summary.click()
    assert out.is_displayed() and "line 199" in out.text and folded[0].get_attribute("open") is not None
    shot(d, shots, "long-output-unfolded.png")
    assert_fetched_nothing(d, page, urls)


def pwned_run(root: Path) -> Path:
    """test_view's hostile run, and script that would set ``window.__pwned`` wherever text goes."""
    run = hostile_run(root)
    t = json.loads((run / "trajectory.json").read_text())
    t["task"]["query"] = "q " + PWN
    t["answer"] = PWN + HOSTILE
    step = t["steps"][0]
    step["assistant"]["content"] = PWN + step["assistant"]["content"]
    step["assistant"]["reasoning_content"] = PWN
    step["observations"][1]["output"] = "edited " + PWN
    (run / "trajectory.json").write_text(json.dumps(t))
    (run / "files" / "pwn.html").write_text(PWN)
    return run


def test_hostile_content_renders_as_text_in_chromium(browser, tmp_path, shots):
    from selenium.common.exceptions import NoAlertPresentException

    d = chrome(browser)
    page = write_html(load_run(pwned_run(tmp_path)), tmp_path / "hostile.html")
    took, urls = open_page(d, page)
    print(f"hostile page: {page.stat().st_size:,} bytes, loaded in {took:.3f} s")
    assert took < HANG
    with pytest.raises(NoAlertPresentException):
        _ = d.switch_to.alert
    assert d.execute_script("return window.__alerts") == []
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    # only the page's own two scripts; no image, iframe or link made from the data
    assert d.execute_script("return document.scripts.length") == 2
    assert d.execute_script("return document.querySelectorAll('img, iframe, object, embed, a, link').length") == 0
    assert visible_steps(d) == ["step-1"]
    text = d.execute_script("return document.body.innerText")
    assert "<script>window.__pwned=1</script>" in text and '<img src=x onerror="window.__pwned=1">' in text
    assert "</script><script>alert(1)</script>" in text and "characters left out by the viewer" in text
    assert "\x1b" not in text and "SECRET-OUTSIDE-THE-RUN" not in text
    shot(d, shots, "hostile-1-top.png")
    t0 = time.perf_counter()
    press(d, "j")
    d.find_element("id", "search").send_keys("pwned")
    print(f"hostile page: j and a search took {time.perf_counter() - t0:.3f} s")
    assert current_steps(d) == ["step-1"] and visible_steps(d) == ["step-1"]
    shot(d, shots, "hostile-2-search.png")
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    assert_fetched_nothing(d, page, urls)
    assert requests(d) == []


# -- the eval page ---------------------------------------------------------------------------------
# records, in every document before its own scripts, when the tasks table first has rows (a
# MutationObserver's callback runs after the page's synchronous render script has finished)
ROWS_AT = """
window.__rowsAt = null;
new MutationObserver(function (ms, obs) {
  var t = document.getElementById('tasks');
  if (t && t.querySelectorAll('tr[data-key]').length) { window.__rowsAt = performance.now(); obs.disconnect(); }
}).observe(document, {childList: true, subtree: true});
"""


@pytest.fixture
def rows_timer(browser):
    """ROWS_AT in every document loaded during the test (removed after it)."""
    d = chrome(browser)
    ident = d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ROWS_AT})["identifier"]
    yield d
    d.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": ident})


def task_rows(driver) -> list[str]:
    """The data-key of each row of the tasks table, in order (the keys are ``mode/domain/id/repeat``)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#tasks tr[data-key]')).map(function (r) {"
        " return r.getAttribute('data-key'); })"
    )


def column(driver, n: int) -> list[str]:
    """The text of the ``n``-th cell (0-based) of each row of the tasks table."""
    return driver.execute_script(
        "var n = arguments[0]; return Array.from(document.querySelectorAll('#tasks tr[data-key]')).map("
        "function (r) { return r.children[n].textContent; })",
        n,
    )


def timings(driver) -> dict:
    """ms from navigationStart: the load event's end, and the tasks table having rows."""
    return driver.execute_script(
        "var t = performance.timing;"
        "return {load_ms: t.loadEventEnd - t.navigationStart, rows_ms: window.__rowsAt,"
        " dcl_ms: t.domContentLoadedEventEnd - t.navigationStart};"
    )


def test_a_real_eval_in_chromium(rows_timer, real_eval, shots):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = rows_timer
    page, data, pages = write_eval(real_eval)
    assert pages == 6
    took, urls = open_page(d, page)
    t = timings(d)
    print(f"real eval page: {page.stat().st_size:,} bytes, loaded in {took:.3f} s, {t}")
    assert took < HANG and t["rows_ms"] is not None
    assert d.title == "sandboxlite eval scripted"
    keys = task_rows(d)
    assert sorted(keys) == sorted(r["key"] for r in data["rows"]) and len(keys) == 6  # a row per record
    text = d.execute_script("return document.body.innerText")
    assert "6 of 6 tasks" in text and "Accuracy per domain" in text
    # charts: inline SVG, with bars for both modes and the accuracy's interval bars
    for chart in ("chart-accuracy", "chart-tokens", "chart-steps", "chart-failures", "chart-tools"):
        assert d.find_element(By.ID, chart).find_elements(By.TAG_NAME, "svg"), chart
    assert d.execute_script("return document.querySelectorAll('svg rect.bar-sandbox').length") > 0
    assert d.execute_script("return document.querySelectorAll('svg rect.bar-vanilla').length") > 0
    assert d.execute_script("return document.querySelectorAll('svg line.ci').length") == 2
    assert d.execute_script("return document.querySelector('svg').namespaceURI") == "http://www.w3.org/2000/svg"
    # a count axis labels whole numbers where they are: 0, max/2, max (an odd max once put "2" at 1.5)
    for chart in ("chart-steps", "chart-failures", "chart-tools"):
        ticks = d.execute_script(
            "return Array.from(document.querySelectorAll('#' + arguments[0] + ' svg text[text-anchor=end]'))"
            ".filter(function (t) { return !t.getAttribute('transform'); })"
            ".map(function (t) { return [Number(t.textContent), Number(t.getAttribute('y'))]; });", chart)
        assert len(ticks) >= 2, (chart, ticks)
        (v0, y0), (vmax, ymax) = min(ticks), max(ticks)
        assert v0 == 0 and vmax >= 1 and y0 > ymax, (chart, ticks)
        for v, y in ticks:
            assert v == int(v) and abs(y - (y0 + (ymax - y0) * v / vmax)) < 0.5, (chart, ticks)
    shot(d, shots, "eval-1-top.png")

    # sandbox and vanilla runs of a task are next to each other (the default order: domain, task, mode)
    def adjacent_pairs(keys: list[str]) -> None:
        assert len(keys) % 2 == 0, keys
        for a, b in zip(keys[::2], keys[1::2]):
            a, b = a.split("/"), b.split("/")
            assert (a[0], b[0]) == ("sandbox", "vanilla") and a[1:] == b[1:], (a, b)

    adjacent_pairs(keys)

    # filters: mode, domain, text
    Select(d.find_element(By.ID, "f-mode")).select_by_value("vanilla")
    assert len(task_rows(d)) == 3 and all(k.startswith("vanilla/") for k in task_rows(d))
    shot(d, shots, "eval-2-vanilla.png")
    Select(d.find_element(By.ID, "f-mode")).select_by_value("")
    assert len(task_rows(d)) == 6
    Select(d.find_element(By.ID, "f-domain")).select_by_value("mine")
    assert len(task_rows(d)) == 6  # the one domain
    box = d.find_element(By.ID, "f-text")
    box.send_keys("zero")
    assert sorted(task_rows(d)) == ["sandbox/mine/zero/0", "vanilla/mine/zero/0"]
    box.send_keys("-no-such-task")
    assert task_rows(d) == [] and "0 of 6 tasks" in d.execute_script("return document.body.innerText")
    box.clear()
    box.send_keys(" ")  # clear() fires no input event: type, then erase, to fire one
    box.send_keys("\b")
    assert len(task_rows(d)) == 6

    # sort: a click on "steps" orders by steps ascending (vanilla's 1 before sandbox's 4), again descending
    steps_col = 4  # the columns: domain, task, mode, score, steps, ...
    d.find_element(By.CSS_SELECTOR, "#tasks th[data-key='steps']").click()
    up = task_rows(d)
    assert [int(x) for x in column(d, steps_col)] == [1, 1, 1, 4, 4, 4] and up != keys
    assert all(k.startswith("vanilla/") for k in up[:3])
    assert "\u25b2" in d.find_element(By.CSS_SELECTOR, "#tasks th[data-key='steps']").text
    d.find_element(By.CSS_SELECTOR, "#tasks th[data-key='steps']").click()
    down = task_rows(d)
    assert [int(x) for x in column(d, steps_col)] == [4, 4, 4, 1, 1, 1] and down != up
    shot(d, shots, "eval-3-sorted-steps.png")
    # grouped: sorted by steps, still each task's sandbox run right before its vanilla run
    d.find_element(By.ID, "f-paired").click()
    adjacent_pairs(task_rows(d))
    assert len(d.find_elements(By.CSS_SELECTOR, "#tasks tr.pairstart")) == 3

    # nothing fetched so far
    assert_fetched_nothing(d, page, urls)
    assert requests(d) == []

    # a row's trajectory link opens that trajectory's own page, from file://, and it renders its steps
    row = d.find_element(By.CSS_SELECTOR, "#tasks tr[data-key='sandbox/mine/add/0']")
    link = row.find_element(By.CSS_SELECTOR, "a.traj")
    href = link.get_attribute("href")  # resolved against the page's own file:// URL
    want = (real_eval / "trajectories/sandbox/mine/add/view.html").resolve().as_uri()
    raw = d.execute_script("return arguments[0].getAttribute('href')", link)  # as written: relative
    assert href == want and not raw.startswith(("/", "file:")) and (page.parent / unquote(raw)).is_file(), (href, raw)
    link.click()
    assert d.current_url == want
    assert d.title.startswith("sandboxlite run")
    assert visible_steps(d) == ["step-1", "step-2", "step-3", "step-4"]
    assert "What is 17 + 25?" in d.execute_script("return document.body.innerText")
    shot(d, shots, "eval-4-trajectory.png")
    assert requests(d) == [want]  # the trajectory page itself, nothing else
    assert d.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert d.execute_script("return window.__csp") == [] and console_errors(d) == []
    d.back()
    assert d.current_url == page.resolve().as_uri() and len(task_rows(d)) == 6
    assert [u for u in requests(d) if u != page.resolve().as_uri()] == []


def test_a_500_record_eval_in_chromium(rows_timer, tmp_path, shots):
    d = rows_timer
    ev = synthetic_eval(tmp_path / "big")
    t0 = time.perf_counter()
    page, data, pages = write_eval(ev)
    wrote = time.perf_counter() - t0
    assert pages == 500 and len(data["rows"]) == 500
    took, urls = open_page(d, page)
    t = timings(d)
    size = page.stat().st_size
    print(
        f"\n500-record eval page: {size:,} bytes ({size / 1e6:.2f} MB), written in {wrote:.2f} s (with 500 "
        f"trajectory pages); driver.get {took * 1000:.0f} ms; navigationStart to loadEventEnd {t['load_ms']} ms; "
        f"tasks table has its rows at {t['rows_ms']:.0f} ms"
    )
    assert took < HANG and t["load_ms"] < HANG * 1000 and t["rows_ms"] is not None
    keys = task_rows(d)
    assert len(keys) == 500 and len(set(keys)) == 500
    assert "500 of 500 tasks" in d.execute_script("return document.body.innerText")
    assert d.execute_script("return document.querySelectorAll('svg').length") == 5
    shot(d, shots, "eval-500-top.png")
    assert_fetched_nothing(d, page, urls)
