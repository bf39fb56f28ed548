// The status page: polls /status/data every second and draws it. Keys are
// the clients' data: they are only ever set as text, never as HTML.
"use strict";

const colors = {
  allowed: "#12b76a", denied: "#f04438", shadow_denied: "#f79009",
  fail_open: "#7a5af8", fail_closed: "#344054",
};
const charts = new Map(); // limiter name -> {section, plot, rules}
let failures = 0;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

// shortDuration turns a Go duration ("15m0s", "1h0m0s") into a short one ("15m", "1h").
function shortDuration(d) {
  return d.replace(/(\d)m0s$/, "$1m").replace(/(\d)h0m$/, "$1h");
}

function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 90) return s + "s ago";
  if (s < 5400) return Math.round(s / 60) + "m ago";
  return Math.round(s / 3600) + "h ago";
}

function showConfig(c) {
  const box = document.getElementById("config");
  box.textContent = "";
  let what = (c.file ? c.file : "built-in configuration") + ", " + c.limiters + " limiters";
  if (c.envoy_domains !== undefined) what += ", " + c.envoy_domains + " Envoy domains";
  box.append(what + ", loaded " + ago(c.loaded_at) + " (" + c.loaded_at.replace(/\.\d+/, "") + "); last reload: ");
  if (c.last_reload_error) {
    box.append(el("span", "err", "failed " + ago(c.last_reload_failed_at) + ": " + c.last_reload_error));
  } else {
    box.append(el("span", "ok", "ok"));
  }
}

function chartFor(l, results) {
  let c = charts.get(l.name);
  if (c) return c;
  const section = el("section");
  section.id = "limiter-" + l.name;
  const title = el("div", "title");
  title.append(el("h2", "", l.name));
  const badges = el("span");
  title.append(badges);
  section.append(title);
  const now = el("div", "now");
  section.append(now);
  const box = el("div", "chart");
  section.append(box);
  const rules = el("div");
  section.append(rules);
  document.getElementById("limiters").append(section);
  const opts = {
    width: Math.max(300, box.clientWidth || 520), height: 200,
    padding: [10, 28, 0, 0],
    // An idle limiter's chart spans 0 to 1, not uPlot's 0 to 100.
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [
      { space: 70, values: (u, ts) => ts.map(clock) },
      { label: "decisions/s", size: 60 },
    ],
    series: [{}].concat(results.map(r => ({
      label: r, stroke: colors[r], width: 1.5, points: { show: false },
    }))),
    legend: { live: false },
  };
  const empty = [[]].concat(results.map(() => []));
  const plot = new uPlot(opts, empty, box);
  c = { section, badges, now, plot, box, rules };
  charts.set(l.name, c);
  return c;
}

function showLimiter(l, results) {
  const c = chartFor(l, results);
  c.badges.textContent = "";
  if (l.envoy_domain) c.badges.append(el("span", "badge", "Envoy domain " + l.envoy_domain), " ");
  c.badges.append(el("span", "badge " + l.breaker, "breaker " + l.breaker), " ",
    el("span", "badge", "fail " + l.failure_policy));
  if (l.shadow) c.badges.append(" ", el("span", "badge", "shadow"));
  const last = l.rates[0].length - 1;
  const parts = results.map((r, i) => [r, l.rates[i][last]]).filter(([, n]) => n > 0).map(([r, n]) => n + " " + r);
  c.now.textContent = "last second: " + (parts.length ? parts.join(" · ") : "no decisions");
  const xs = l.rates[0].map((_, i) => l.start + i);
  c.plot.setData([xs].concat(l.rates));
  const table = el("table");
  const head = el("tr");
  for (const h of ["rule", "limit", "denied", "top denied keys (denials ± error / decisions)"]) head.append(el("th", "", h));
  table.append(head);
  for (const r of l.rules) {
    const tr = el("tr");
    tr.className = "rule";
    tr.dataset.rule = r.rule;
    const name = el("td");
    name.append(el("strong", "", r.rule));
    name.append(el("div", "none", r.algorithm + (r.key.length ? " by " + r.key.join(", ") : " (global)") + (r.shadow ? ", shadow" : "")));
    tr.append(name);
    tr.append(el("td", "num", r.limit + (r.window ? " / " + shortDuration(r.window) : "")));
    tr.append(el("td", "num", String(r.total)));
    const keys = el("td");
    if (r.keys.length === 0) {
      keys.append(el("span", "none", "none"));
    } else {
      const ul = el("ul", "keys");
      for (const k of r.keys) {
        const li = el("li");
        const key = el("code", "", k.key);
        key.title = k.key; // a long key is cut short on the page
        li.append(key);
        li.append(el("span", "num", k.denials + (k.denials_error ? " ±" + k.denials_error : "") + " / " + k.decisions));
        ul.append(li);
      }
      keys.append(ul);
    }
    tr.append(keys);
    table.append(tr);
  }
  c.rules.replaceChildren(table);
}

function resize() {
  for (const c of charts.values()) {
    c.plot.setSize({ width: Math.max(300, c.box.clientWidth), height: 200 });
  }
}

async function refresh() {
  const over = document.getElementById("span").value;
  try {
    // An absolute URL without the page's user info (a page opened as
    // http://user:token@host/status/ may not fetch with credentials in the
    // URL; the browser sends the ones it was given by itself).
    const url = new URL("data?span=" + encodeURIComponent(over), location.origin + location.pathname);
    const resp = await fetch(url, { cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    const d = await resp.json();
    showConfig(d.config);
    const seen = new Set();
    const limiters = d.limiters || [];
    for (const l of limiters) {
      showLimiter(l, d.results);
      seen.add(l.name);
    }
    // Nothing configured is a state to show, not a failure.
    document.getElementById("empty").hidden = limiters.length > 0;
    for (const [name, c] of charts) {
      if (!seen.has(name)) { c.plot.destroy(); c.section.remove(); charts.delete(name); }
    }
    failures = 0;
    document.getElementById("updated").textContent = "updated " + clock(Date.parse(d.now) / 1000);
  } catch (e) {
    failures++;
    document.getElementById("updated").textContent = "update failed (" + e.message + "), retrying";
  }
  setTimeout(refresh, failures ? Math.min(10000, 1000 * failures) : 1000);
}

window.addEventListener("resize", resize);
document.getElementById("span").addEventListener("change", refresh);
refresh();
