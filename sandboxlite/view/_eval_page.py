"""The eval page's fixed parts: extra CSS and the script that renders an ``load_eval`` dict.

Like the run page: every node is built with ``createElement`` / ``createElementNS`` (the charts are
inline SVG) and text is set with ``textContent`` only; nothing is fetched.  The only URL-like text
is the SVG namespace name, which names no resource.
"""

EVAL_CSS = """
main{max-width:1400px}
.bar{display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin-top:4px}
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px}
.chart h3{margin:0 0 4px}
th.sort{cursor:pointer;user-select:none}th.sort:hover{background:#eef}
tr.sandbox td:first-child{border-left:3px solid #2a6fdb}tr.vanilla td:first-child{border-left:3px solid #e07b00}
tr.pairstart td{border-top:2px solid #999}
td.num{text-align:right;font-variant-numeric:tabular-nums}.legend span{margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""

EVAL_JS = r"""
window.sandboxliteRender = function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var root = document.getElementById("app");
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = {sandbox: "#2a6fdb", vanilla: "#e07b00"};
  var OTHER = ["#6a4fb3", "#1b7f3b", "#b00020", "#777"];
  function color(mode) { var i = D.modes.indexOf(mode); return COLORS[mode] || OTHER[Math.max(0, i) % OTHER.length]; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(x, d) { return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(d === undefined ? 2 : d)) : ""; }
  function pct(x) { return typeof x === "number" ? (100 * x).toFixed(1) : ""; }

  // -- header and filters ------------------------------------------------------------------
  var state = {domain: "", mode: "", text: "", paired: false, key: "domain", dir: 1};
  function header() {
    var h = document.getElementById("top");
    var model = D.run && D.run.model ? String(D.run.model) : "?";
    document.title = "sandboxlite eval " + model.slice(0, 80);
    add(h, el("h1", null, "Eval \u00b7 " + model + " \u00b7 " + D.rows.length + " tasks"));
    var m = add(h, el("div", "meta"));
    add(m, el("span", null, "modes: " + D.modes.join(", ")));
    add(m, el("span", null, "domains: " + D.domains.length));
    if (D.run && D.run.fingerprint) add(m, el("span", null, "fingerprint: " + D.run.fingerprint));
    if (D.run && D.run.written_at) add(m, el("span", null, "written: " + D.run.written_at));
    if (D.records_left_out) add(m, el("span", "bad", D.records_left_out + " more records not shown"));
    var bar = add(h, el("div", "bar"));
    function select(id, label, values, field) {
      var s = add(bar, el("select")); s.id = id;
      var all = add(s, el("option", null, "all " + label)); all.value = "";
      values.forEach(function (v) { var o = add(s, el("option", null, v)); o.value = v; });
      s.addEventListener("change", function () { state[field] = s.value; renderTable(); });
    }
    select("f-domain", "domains", D.domains, "domain");
    select("f-mode", "modes", D.modes, "mode");
    var q = add(bar, el("input")); q.type = "search"; q.id = "f-text"; q.placeholder = "filter tasks (/)";
    q.addEventListener("input", function () { state.text = q.value.toLowerCase(); renderTable(); });
    var lab = add(bar, el("label")); var cb = add(lab, el("input")); cb.type = "checkbox"; cb.id = "f-paired";
    add(lab, el("span", null, " sandbox and vanilla side by side"));
    cb.addEventListener("change", function () { state.paired = cb.checked; renderTable(); });
    add(bar, el("span", "kbd", "click a column to sort \u00b7 / : filter"));
  }

  // -- summary table and charts --------------------------------------------------------------
  function legend(parent, modes) {
    var l = add(parent, el("div", "legend meta"));
    modes.forEach(function (m) { var s = add(l, el("span")); var w = add(s, el("span", "sw")); w.style.background = color(m); add(s, el("span", null, m)); });
  }
  // grouped bars: cats x modes; get(cat, mode) -> {v, lo, hi, label} or null
  function barChart(parent, id, title, cats, modes, get, maxv, fmtv) {
    var box = add(parent, el("div", "chart")); box.id = id;
    add(box, el("h3", null, title)); legend(box, modes);
    if (!cats.length) { add(box, el("div", "meta", "no data")); return box; }
    var gw = Math.max(24, modes.length * 18 + 10), left = 44, top = 10, ph = 160, bottom = 70;
    var w = left + cats.length * gw + 10, hgt = top + ph + bottom;
    var s = add(box, sv("svg", {width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt, role: "img"}));
    add(s, sv("title", {}, title));
    if (!(maxv > 0)) maxv = 1;
    function y(v) { return top + ph - ph * Math.max(0, Math.min(v, maxv)) / maxv; }
    var ticks = [];
    [0, 1, 0.5].forEach(function (f) { if (ticks.indexOf(fmtv(f * maxv)) < 0) ticks.push(fmtv(f * maxv)); else return;
      add(s, sv("line", {x1: left, x2: w - 5, y1: y(f * maxv), y2: y(f * maxv), stroke: "#ddd"}));
      add(s, sv("text", {x: left - 4, y: y(f * maxv) + 4, "text-anchor": "end", "font-size": 10}, fmtv(f * maxv)));
    });
    cats.forEach(function (c, i) {
      var x0 = left + i * gw + 5;
      modes.forEach(function (m, j) {
        var g = get(c, m); if (!g || typeof g.v !== "number") return;
        var x = x0 + j * 18;
        var r = add(s, sv("rect", {x: x, y: y(g.v), width: 14, height: Math.max(0, y(0) - y(g.v)), fill: color(m), "class": "bar-" + m}));
        add(r, sv("title", {}, c + " \u00b7 " + m + ": " + (g.label || fmtv(g.v))));
        if (typeof g.lo === "number" && typeof g.hi === "number") {
          var cx = x + 7;
          add(s, sv("line", {x1: cx, x2: cx, y1: y(g.lo), y2: y(g.hi), stroke: "#111", "stroke-width": 1.2, "class": "ci"}));
          add(s, sv("line", {x1: cx - 4, x2: cx + 4, y1: y(g.lo), y2: y(g.lo), stroke: "#111"}));
          add(s, sv("line", {x1: cx - 4, x2: cx + 4, y1: y(g.hi), y2: y(g.hi), stroke: "#111"}));
        }
      });
      var lx = x0 + modes.length * 9, ly = top + ph + 10;
      add(s, sv("text", {x: lx, y: ly, "font-size": 10, "text-anchor": "end", transform: "rotate(-40 " + lx + " " + ly + ")"},
        String(c).length > 18 ? String(c).slice(0, 17) + "\u2026" : c));
    });
    return box;
  }
  // a count axis ends on an even number, so its middle tick is a whole count (3 -> 4: 0, 2, 4)
  function evenMax(n) { return n > 1 && n % 2 ? n + 1 : n; }
  function cellMap(list) { var m = {}; list.forEach(function (a) { m[a.domain + "\u0000" + a.mode] = a; }); return m; }

  function summarySection() {
    var S = D.summary;
    add(root, el("h2", null, "Accuracy per domain (95% Wilson interval)"));
    var acc = cellMap(S.accuracy), tok = cellMap(S.tokens);
    var doms = D.domains.concat(D.domains.length > 1 ? ["all"] : []);
    var t = add(root, el("table")); t.id = "accuracy";
    var hr = add(t, el("tr")); add(hr, el("th", null, "domain"));
    D.modes.forEach(function (m) { add(hr, el("th", null, m + " %")); add(hr, el("th", null, "95% CI")); add(hr, el("th", null, "n")); add(hr, el("th", null, "mean tokens")); });
    doms.forEach(function (d) {
      var tr = add(t, el("tr")); add(tr, el("td", null, d));
      D.modes.forEach(function (m) {
        var a = acc[d + "\u0000" + m], k = tok[d + "\u0000" + m];
        add(tr, el("td", "num", a ? pct(a.mean) : ""));
        add(tr, el("td", "num", a && typeof a.lo === "number" ? pct(a.lo) + "\u2013" + pct(a.hi) : ""));
        add(tr, el("td", "num", a ? a.n : ""));
        add(tr, el("td", "num", k && typeof k.mean === "number" ? k.mean.toFixed(0) : ""));
      });
    });
    add(root, el("h2", null, "Charts"));
    var charts = add(root, el("div", "charts"));
    barChart(charts, "chart-accuracy", "Accuracy % per domain (bars: 95% interval)", doms, D.modes, function (c, m) {
      var a = acc[c + "\u0000" + m]; return a ? {v: a.mean, lo: a.lo, hi: a.hi, label: pct(a.mean) + "% [" + pct(a.lo) + ", " + pct(a.hi) + "], n=" + a.n} : null;
    }, 1, function (v) { return (100 * v).toFixed(0); });
    var tmax = 0; S.tokens.forEach(function (k) { if (k.domain !== "all" && typeof k.mean === "number") tmax = Math.max(tmax, k.mean); });
    barChart(charts, "chart-tokens", "Mean tokens per task", D.domains, D.modes, function (c, m) {
      var k = tok[c + "\u0000" + m]; return k && typeof k.mean === "number" ? {v: k.mean, label: k.mean.toFixed(0)} : null;
    }, tmax, function (v) { return v >= 1000 ? (v / 1000).toFixed(1) + "k" : v.toFixed(0); });
    var bins = S.steps.bins.map(function (b) { return b.lo === b.hi ? String(b.lo) : b.lo + "\u2013" + b.hi; });
    var smodes = D.modes.filter(function (m) { return S.steps.counts[m]; });
    var smax = 0; Object.keys(S.steps.counts).forEach(function (m) { S.steps.counts[m].forEach(function (n) { smax = Math.max(smax, n); }); });
    barChart(charts, "chart-steps", "Steps per task (tasks)", bins, smodes, function (c, m) {
      var n = S.steps.counts[m][bins.indexOf(c)]; return n ? {v: n} : null;
    }, evenMax(smax), function (v) { return v.toFixed(0); });
    var reasons = Object.keys(S.failures), fmax = 0;
    reasons.forEach(function (r) { Object.keys(S.failures[r]).forEach(function (m) { fmax = Math.max(fmax, S.failures[r][m]); }); });
    barChart(charts, "chart-failures", "Why tasks failed (tasks)", reasons, D.modes, function (c, m) {
      var n = S.failures[c][m]; return n ? {v: n} : null;
    }, evenMax(fmax), function (v) { return v.toFixed(0); });
    var tools = {}, tmodes = D.modes.filter(function (m) { return S.tools[m]; }), tm = 0;
    tmodes.forEach(function (m) { Object.keys(S.tools[m]).forEach(function (k) { tools[k] = 1; tm = Math.max(tm, S.tools[m][k]); }); });
    barChart(charts, "chart-tools", "Tool calls", Object.keys(tools), tmodes, function (c, m) {
      var n = S.tools[m][c]; return n ? {v: n} : null;
    }, evenMax(tm), function (v) { return v.toFixed(0); });
  }

  // -- the tasks table -----------------------------------------------------------------------
  var COLS = [["domain", "domain"], ["id", "task"], ["mode", "mode"], ["score", "score"], ["steps", "steps"],
    ["tokens", "tokens"], ["wall_s", "wall s"], ["failure", "failure / reason"], ["extracted", "extracted"]];
  D.rows.forEach(function (r, i) {
    r._i = i;
    r._text = [r.domain, r.id, r.mode, r.error, r.reason, r.failure, r.extracted, r.response].join(" ").toLowerCase();
  });
  function shown(r) {
    return (!state.domain || r.domain === state.domain) && (!state.mode || r.mode === state.mode) &&
      (!state.text || r._text.indexOf(state.text) >= 0);
  }
  function tie(a, b) {  // equal in the sort column: the same task's runs next to each other, sandbox first
    return String(a.domain).localeCompare(String(b.domain)) || String(a.id).localeCompare(String(b.id)) ||
      (a.repeat || 0) - (b.repeat || 0) || D.modes.indexOf(a.mode) - D.modes.indexOf(b.mode) || a._i - b._i;
  }
  function cmp(a, b) {
    var x = a[state.key], y = b[state.key];
    if (x === y) return tie(a, b);
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    if (typeof x === "number" && typeof y === "number") return state.dir * (x - y);
    return state.dir * String(x).localeCompare(String(y));
  }
  function pairKey(r) { return r.domain + "\u0000" + r.id + "\u0000" + r.repeat; }
  function linkCell(tr, r) {
    var td = add(tr, el("td"));
    if (r.link) { var a = add(td, el("a", "traj", "trajectory")); a.href = r.link; }
    else add(td, el("span", "meta", "no page"));
  }
  function rowCells(tr, r, cols) {
    cols.forEach(function (c) {
      var v = r[c[0]], cls = typeof v === "number" ? "num" : null;
      if (c[0] === "score") cls = "num " + (v >= 1 ? "ok" : "bad");
      if (c[0] === "failure") v = r.error ? r.error : r.failure ? r.failure + (r.reason && r.failure !== r.reason ? " (" + r.reason + ")" : "") : r.reason;
      var td = add(tr, el("td", cls, typeof v === "number" ? fmt(v) : v));
      if (c[0] === "failure" && r.error) td.className = "bad";
    });
  }
  var wrap;
  function renderTable() {
    while (wrap.firstChild) wrap.removeChild(wrap.firstChild);
    var rows = D.rows.filter(shown);
    if (state.paired) {
      var groups = {}, order = [];
      D.rows.slice().sort(cmp).forEach(function (r) {
        if (!shown(r)) return;
        var k = pairKey(r); if (!groups[k]) { groups[k] = []; order.push(k); } groups[k].push(r);
      });
      rows = [];
      order.forEach(function (k) {
        groups[k].sort(function (a, b) { return D.modes.indexOf(a.mode) - D.modes.indexOf(b.mode); });
        groups[k].forEach(function (r, j) { r._start = j === 0; rows.push(r); });
      });
    } else {
      rows.sort(cmp); rows.forEach(function (r) { r._start = false; });
    }
    add(wrap, el("div", "meta", rows.length + " of " + D.rows.length + " tasks" + (state.paired ? " (grouped by task: sandbox next to vanilla)" : "")));
    var t = add(wrap, el("table")); t.id = "tasks";
    var hr = add(t, el("tr"));
    COLS.forEach(function (c) {
      var th = add(hr, el("th", "sort", c[1] + (state.key === c[0] ? (state.dir > 0 ? " \u25b2" : " \u25bc") : "")));
      th.setAttribute("data-key", c[0]);
      th.addEventListener("click", function () {
        if (state.key === c[0]) state.dir = -state.dir; else { state.key = c[0]; state.dir = 1; }
        renderTable();
      });
    });
    add(hr, el("th", null, "page"));
    rows.forEach(function (r) {
      var tr = add(t, el("tr", String(r.mode) + (r._start ? " pairstart" : "")));
      tr.setAttribute("data-key", String(r.key));
      rowCells(tr, r, COLS); linkCell(tr, r);
    });
  }
  function tableSection() {
    add(root, el("h2", null, "Tasks (" + D.rows.length + ")"));
    wrap = add(root, el("div")); wrap.id = "tasks-wrap";
    renderTable();
  }
  // one handler, whatever the number of renders (a live page renders again)
  if (window.sandboxliteKeys) document.removeEventListener("keydown", window.sandboxliteKeys);
  window.sandboxliteKeys = function (e) {
    if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT")) {
      if (e.key === "Escape" && e.target.blur) e.target.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") { e.preventDefault(); document.getElementById("f-text").focus(); }
  };
  document.addEventListener("keydown", window.sandboxliteKeys);

  header(); summarySection(); tableSection();
};
window.sandboxliteRender();
"""
