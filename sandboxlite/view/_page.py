"""The page's fixed parts: its CSS and the script that renders the embedded data.

The script builds every node with ``createElement`` and sets text with ``textContent`` only: no
data ever goes through ``innerHTML``.  Nothing here names a URL: the page fetches nothing.
"""

CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
# the live page (``--serve``) may ask its own server (loopback) for the data again, nothing else
LIVE_CSP = CSP + "; connect-src 'self'"

# The live page: every second, data.json from the server that served the page; when it differs,
# the data element takes it and the page renders again (scroll position and search kept).
LIVE_JS = r"""
(function () {
  "use strict";
  var last = document.getElementById("data").textContent;
  function again(text) {
    var y = window.scrollY, q = document.getElementById("search") || document.getElementById("f-text");
    var qv = q ? q.value : "", qid = q ? q.id : null;
    document.getElementById("data").textContent = text;
    document.getElementById("top").textContent = "";
    document.getElementById("app").textContent = "";
    window.sandboxliteRender();
    if (qid && qv) { var n = document.getElementById(qid); n.value = qv; n.dispatchEvent(new Event("input")); }
    window.scrollTo(0, y);
  }
  function poll() {
    fetch("data.json", {cache: "no-store"}).then(function (r) { return r.ok ? r.text() : null; })
      .then(function (t) { if (t !== null && t !== last) { last = t; again(t); } })
      .catch(function () {}).then(function () { setTimeout(poll, 1000); });
  }
  setTimeout(poll, 1000);
})();
"""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:8px 16px;z-index:1}
main{max-width:1100px;margin:0 auto;padding:8px 16px 64px}
h1{font-size:18px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}h3{font-size:14px;margin:0}
pre{background:#f3f3f3;border:1px solid #e2e2e2;padding:6px 8px;overflow:auto;white-space:pre-wrap;
word-break:break-word;margin:4px 0;font:12.5px/1.4 ui-monospace,monospace;max-height:60vh}
.meta{color:#555;font-size:13px}.meta span{margin-right:14px}
.step{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.step.current{outline:2px solid #2a6fdb}.step.hidden{display:none}
.call{border-left:3px solid #999;padding-left:8px;margin:8px 0}
.bad{color:#b00020;font-weight:600}.ok{color:#1b7f3b}.flag{background:#fff3cd;border-radius:3px;padding:0 4px;margin-left:6px}
.add{color:#1b7f3b}.del{color:#b00020}.hunk{color:#6a4fb3}
.reasoning pre{background:#f6f2fb}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
input[type=search]{width:320px;padding:4px 6px}.kbd{color:#777;font-size:12px;margin-left:10px}
"""

JS = r"""
window.sandboxliteRender = function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var root = document.getElementById("app");
  var FOLD = 40;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function lines(s) { return s ? String(s).split("\n").length : 0; }
  function pre(text, label) {
    var p = el("pre", null, text);
    var n = lines(text);
    if (n <= FOLD) return p;
    var d = el("details"); add(d, el("summary", null, (label || "text") + ": " + n + " lines (click to show)"));
    add(d, p); return d;
  }
  function diffPre(text) {
    var p = el("pre");
    String(text).split("\n").forEach(function (line) {
      var c = line.indexOf("+++") === 0 || line.indexOf("---") === 0 ? "hunk" : line[0] === "+" ? "add" :
        line[0] === "-" ? "del" : line.indexOf("@@") === 0 ? "hunk" : null;
      add(p, el("span", c, line + "\n"));
    });
    if (lines(text) <= FOLD) return p;
    var d = el("details"); add(d, el("summary", null, "diff: " + lines(text) + " lines (click to show)"));
    add(d, p); return d;
  }
  function meta(parent, pairs) {
    var m = add(parent, el("div", "meta"));
    pairs.forEach(function (kv) {
      if (kv[1] === null || kv[1] === undefined || kv[1] === "") return;
      add(m, el("span", kv[2] || null, kv[0] + ": " + (typeof kv[1] === "object" ? JSON.stringify(kv[1]) : kv[1])));
    });
    return m;
  }
  function secs(x) { return typeof x === "number" ? x.toFixed(3) + " s" : null; }
  function tokens(u) {
    if (!u) return null;
    var parts = [];
    ["prompt_tokens", "completion_tokens", "total_tokens"].forEach(function (k) {
      if (u[k] !== undefined) parts.push(k.replace("_tokens", "") + " " + u[k]);
    });
    return parts.join(", ") || null;
  }

  function header() {
    var h = document.getElementById("top");
    document.title = "sandboxlite run " + String(D.task.id || "").slice(0, 80);
    add(h, el("h1", null, "Run " + (D.task.id || "") + " \u00b7 " + (D.model || "?") + " \u00b7 " + (D.mode || "")));
    var bad = D.reason && D.reason !== "submitted" && D.reason !== "answered";
    meta(h, [["ended", D.exit_reason, bad ? "bad" : "ok"], ["steps", D.steps.length], ["tokens", tokens(D.usage)],
      ["wall", secs(D.duration_s)], ["started", D.started_at],
      ["score", D.score ? D.score.score : "not scored"]]);
    var bar = add(h, el("div"));
    var q = add(bar, el("input")); q.type = "search"; q.id = "search"; q.placeholder = "search steps (/)";
    add(bar, el("span", "kbd", "j / k: next / previous step \u00b7 / : search"));
    q.addEventListener("input", function () { filter(q.value); });
  }

  function taskSection() {
    add(root, el("h2", null, "Task"));
    var t = Object.assign({}, D.task); var inPrompt = t.query_in_prompt; delete t.query_in_prompt;
    add(root, el("div", "meta", inPrompt ? "The prompt the model was given (it holds the query):" : "Query:"));
    add(root, pre(D.query, "query"));
    if (D.inputs.length) {
      add(root, el("h3", null, "Input files"));
      D.inputs.forEach(function (f) { add(root, el("div", "meta", f.name)); add(root, pre(f.text, f.name)); });
    }
    var d = add(root, el("details")); add(d, el("summary", null, "Task fields, system prompt, limits"));
    add(d, pre(JSON.stringify(t, null, 1))); add(d, pre(D.prompt.system, "system prompt"));
    if (D.limits) add(d, pre(JSON.stringify(D.limits, null, 1)));
  }

  function callBlock(parent, c) {
    var b = add(parent, el("div", "call"));
    add(b, el("h3", null, "\u25b6 " + c.name));
    if (c.diff) {
      var rest = Object.assign({}, c.arguments);
      delete rest.old_str; delete rest.new_str; delete rest.file_text;
      add(b, el("div", "meta", JSON.stringify(rest)));
      add(b, diffPre(c.diff));
    } else if (c.arguments && typeof c.arguments === "object" && typeof c.arguments.command === "string" &&
               c.name === "execute_bash") {
      add(b, pre("$ " + c.arguments.command, "command"));
      var other = Object.assign({}, c.arguments); delete other.command;
      if (Object.keys(other).length) add(b, el("div", "meta", JSON.stringify(other)));
    } else {
      add(b, pre(typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments, null, 1), "arguments"));
    }
    if (c.output === null) { add(b, el("div", "meta bad", "no result recorded")); return; }
    var m = meta(b, [["exit code", c.exit_code, c.exit_code ? "bad" : null], ["took", secs(c.duration_s)]]);
    if (c.timed_out) add(m, el("span", "flag bad", "timed out"));
    if (c.truncated) add(m, el("span", "flag", "output truncated by the tool"));
    if (c.clipped) add(m, el("span", "flag", "output cut by the viewer"));
    add(b, pre(c.output, "output"));
  }

  var steps = [];
  function stepSection() {
    add(root, el("h2", null, "Steps (" + D.steps.length + ")"));
    D.steps.forEach(function (s) {
      var box = add(root, el("section", "step")); box.id = "step-" + s.index; box.tabIndex = -1;
      add(box, el("h3", null, "Step " + s.index));
      meta(box, [["model", secs(s.model_s)], ["tools", secs(s.tools_s)], ["tokens", tokens(s.usage)],
        ["finish", s.finish_reason, s.finish_reason === "length" ? "bad" : null]]);
      if (s.reasoning) { var r = add(box, el("div", "reasoning")); add(r, el("div", "meta", "reasoning")); add(r, pre(s.reasoning, "reasoning")); }
      if (s.text) add(box, pre(s.text, "reply"));
      (s.discarded || []).forEach(function (x) { add(box, el("div", "meta bad", "discarded reply: " + (x.error || ""))); add(box, pre(x.content, "discarded")); });
      s.calls.forEach(function (c) { callBlock(box, c); });
      if (s.error) add(box, el("div", "bad", "error: " + s.error));
      if (s.note) add(box, el("div", "meta", "note: " + s.note));
      steps.push({box: box, text: box.textContent.toLowerCase()});
    });
    if (D.steps_left_out) add(root, el("div", "meta bad", D.steps_left_out + " more steps not shown"));
  }

  function tableSection(title, rows, cols) {
    add(root, el("h2", null, title));
    if (!rows.length) { add(root, el("div", "meta", "none")); return; }
    var t = add(root, el("table")); var hr = add(t, el("tr"));
    cols.forEach(function (c) { add(hr, el("th", null, c)); });
    rows.forEach(function (r) {
      var tr = add(t, el("tr"));
      cols.forEach(function (c) { add(tr, el("td", c === "allowed" ? (r[c] ? "ok" : "bad") : null, r[c])); });
    });
  }

  function endSection() {
    tableSection("Network requests", D.network, ["method", "host", "port", "allowed", "why", "bytes_up", "bytes_down"]);
    add(root, el("h2", null, "Output files (" + D.files.length + ")"));
    if (!D.files.length) add(root, el("div", "meta", "none"));
    D.files.forEach(function (f) {
      var line = f.name + " \u00b7 " + f.kind + (f.size !== null ? " \u00b7 " + f.size + " bytes" : "");
      add(root, el("div", "meta", line + (f.truncated ? " (only the start shown)" : "")));
      if (f.text !== null) add(root, pre(f.text, f.name));
    });
    if (D.files_left_out) add(root, el("div", "meta bad", D.files_left_out + " more files not shown"));
    if (D.skipped_outputs.length) add(root, el("div", "meta bad", "not copied out: " + D.skipped_outputs.join(", ")));
    add(root, el("h2", null, "Answer"));
    add(root, D.answer === null ? el("div", "meta", "no answer") : pre(D.answer, "answer"));
    meta(root, [["score", D.score ? D.score.score : "not scored"], ["extracted", D.score && D.score.extracted],
      ["error", D.score && D.score.error, "bad"], ["ended", D.exit_reason]]);
  }

  var current = -1;
  function visible() { return steps.filter(function (s) { return !s.box.classList.contains("hidden"); }); }
  function filter(q) {
    q = q.toLowerCase();
    steps.forEach(function (s) { s.box.classList.toggle("hidden", q !== "" && s.text.indexOf(q) < 0); });
  }
  function move(d) {
    var v = visible(); if (!v.length) return;
    var at = v.findIndex(function (s) { return s.box.classList.contains("current"); });
    var next = Math.max(0, Math.min(v.length - 1, at < 0 ? 0 : at + d));
    steps.forEach(function (s) { s.box.classList.remove("current"); });
    v[next].box.classList.add("current"); v[next].box.scrollIntoView({block: "start"});
    current = next;
  }
  // one handler, whatever the number of renders (a live page renders again)
  if (window.sandboxliteKeys) document.removeEventListener("keydown", window.sandboxliteKeys);
  window.sandboxliteKeys = function (e) {
    if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA")) {
      if (e.key === "Escape") e.target.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "j") move(1); else if (e.key === "k") move(-1);
    else if (e.key === "/") { e.preventDefault(); document.getElementById("search").focus(); }
  };
  document.addEventListener("keydown", window.sandboxliteKeys);

  header(); taskSection(); stepSection(); endSection();
};
window.sandboxliteRender();
"""
