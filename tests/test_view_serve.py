"""``sandboxlite view --serve`` (issue 38 item 1): the live page on loopback while a run still writes.

A real run's folder (the scripted model through the real CLI) is served by ``ViewServer``; its
trajectory.json then grows a step, as a run does after every step, and the page in headless
Chromium shows it without a reload.  The server answers only its own loopback Host, only the
routes it names (an eval's trajectory folders, reached through no symlink), and writes nothing."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.cli import EXIT_USAGE, main
from sandboxlite.view import ViewServer, load_run
from sandboxlite.view._html import embed_json
from sandboxlite.view._text import sanitize

from . import test_view, test_view_browser, test_view_eval
from .test_view_browser import chrome, requests

# the module-scoped fixtures of those modules, shared (one real run, one real eval, one browser)
real_run = test_view.real_run
real_eval = test_view_eval.real_eval
browser = test_view_browser.browser


@pytest.fixture
def serve():
    servers = []

    def start(path: Path) -> ViewServer:
        s = ViewServer(path, 0)
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def get(server: ViewServer, path: str, host: str | None = None) -> tuple[int, dict, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    c.request("GET", path, headers={"Host": host or f"127.0.0.1:{server.server_port}"})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def grow(run: Path) -> int:
    """Append a step to the run's trajectory.json (a copy of its first), as the loop writes after
    each step; the new number of steps."""
    t = json.loads((run / "trajectory.json").read_text())
    extra = json.loads(json.dumps(t["steps"][0]))
    extra["assistant"] = {**extra["assistant"], "content": "LIVE-STEP-TEXT"}
    for k in ("index", "step"):
        if k in extra:
            extra[k] = len(t["steps"]) + 1
    t["steps"].append(extra)
    tmp = run / ".trajectory.json.tmp"
    tmp.write_text(json.dumps(t))
    tmp.replace(run / "trajectory.json")
    return len(t["steps"])


def test_the_server_gives_the_live_page_and_its_data(real_run, tmp_path, serve):
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    before = sorted(p.name for p in run.rglob("*"))
    s = serve(run)
    assert s.url.startswith("http://127.0.0.1:")
    code, headers, page = get(s, "/")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "connect-src 'self'" in headers["Content-Security-Policy"] and b"connect-src 'self'" in page
    assert page.count(b"<script") == 3 and b'fetch("data.json"' in page  # the page's two, and the live one
    code, headers, data = get(s, "/data.json")
    assert code == 200 and data.decode() == embed_json(sanitize(load_run(run)))
    assert len(json.loads(data)["steps"]) == 4
    n = grow(run)
    assert len(json.loads(get(s, "/data.json")[2])["steps"]) == n == 5  # read again: the file changed
    assert sorted(p.name for p in run.rglob("*")) == before  # the server wrote nothing


def test_only_its_own_host_and_routes(real_run, real_eval, tmp_path, serve):
    s = serve(real_run)
    port = s.server_port
    assert get(s, "/", host=f"evil.test:{port}")[0] == 403  # DNS rebinding: another name for 127.0.0.1
    assert get(s, "/", host="127.0.0.1")[0] == 403
    assert get(s, "/", host=f"localhost:{port}")[0] == 200
    for path in ("/trajectory.json", "/../../etc/passwd", "/answer.txt", "/x/view.html", "/view.html/.."):
        assert get(s, path)[0] == 404, path
    # an eval: its trajectory folders are routes; a symlink to one, or a folder outside, is not
    ev = tmp_path / "eval"
    shutil.copytree(real_eval, ev, symlinks=True)
    rec = json.loads((ev / "results.jsonl").read_text().splitlines()[0])
    folder = next(p.parent for p in (ev / "trajectories").rglob("trajectory.json"))
    rel = folder.relative_to(ev).as_posix()
    (ev / "link").symlink_to(folder, target_is_directory=True)
    e = serve(ev)
    code, _, page = get(e, "/")
    assert code == 200 and b'"kind":"eval"' in page and rec["domain"].encode() in page
    assert get(e, f"/{rel}/view.html")[0] == 200
    assert json.loads(get(e, f"/{rel}/data.json")[2])["kind"] == "run"
    for path in ("/link/view.html", f"/{rel}/../../view.html", "/trajectories/view.html", f"/{rel}/trajectory.json"):
        assert get(e, path)[0] == 404, path


def test_new_steps_appear_in_the_browser_without_a_reload(real_run, tmp_path, serve, browser):
    driver = chrome(browser)
    from selenium.webdriver.common.by import By

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    s = serve(run)
    driver.get(s.url)
    requests(driver)
    assert len(driver.find_elements(By.CSS_SELECTOR, "section.step")) == 4
    driver.execute_script("window.__same_document = 42")
    n = grow(run)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(driver.find_elements(By.CSS_SELECTOR, "section.step")) < n:
        time.sleep(0.2)
    assert len(driver.find_elements(By.CSS_SELECTOR, "section.step")) == n
    assert "LIVE-STEP-TEXT" in driver.find_element(By.ID, "step-5").text
    assert driver.execute_script("return window.__same_document") == 42  # no reload: the same document
    urls = requests(driver)
    assert urls and all(u == f"{s.url}data.json" for u in urls), urls  # it asked its server for data, only that


def test_the_cli_refuses_what_serve_cannot_do(real_run, tmp_path):
    r = CliRunner().invoke(main, ["view", str(real_run), "--serve", "-o", str(tmp_path / "x.html")])
    assert r.exit_code == EXIT_USAGE and "--serve writes no file" in r.output
    r = CliRunner().invoke(main, ["view", str(tmp_path / "nothing"), "--serve"])
    assert r.exit_code == EXIT_USAGE and "does not exist" in r.output
    with ViewServer(real_run, 0) as busy:
        r = CliRunner().invoke(main, ["view", str(real_run), "--serve", str(busy.server_port)])
        assert r.exit_code == EXIT_USAGE and f"cannot listen on 127.0.0.1:{busy.server_port}" in r.output
