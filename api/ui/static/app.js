// The status page: polls the node's overview and renders it. Every value
// shown is also in a data-* attribute, which is what tests read. Data is
// only ever put into the page as text (never as HTML): keys and request ids
// come from clients.
"use strict";

const POLL_MS = 1000;
const TIMEOUT_MS = 5000;
const num = new Intl.NumberFormat("en-US");

// prev holds the last overview's time and policy totals, to turn totals
// into rates; rates holds the last computed rates by policy id.
let prev = null;
let rates = new Map();

async function poll() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  try {
    const res = await fetch("/ui/api/overview", {
      credentials: "same-origin", cache: "no-store", signal: ctl.signal,
      headers: { Accept: "application/json" },
    });
    if (res.ok) {
      render(JSON.parse(await res.text(), exactSplitPoints));
    } else {
      fetchFailed(res.status, await errorText(res));
    }
  } catch (e) {
    fetchFailed(0, e.name === "AbortError" ? `no answer within ${TIMEOUT_MS / 1000} s` : e.message);
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

// exactSplitPoints keeps a split's point (a 64-bit hash) exact, which a
// JavaScript number cannot; browsers without JSON source access get the
// rounded number.
function exactSplitPoints(key, value, ctx) {
  return key === "at" && ctx && typeof ctx.source === "string" ? BigInt(ctx.source) : value;
}

async function errorText(res) {
  try {
    const body = await res.json();
    return body.error || res.statusText;
  } catch {
    return res.statusText;
  }
}

// fetchError is the current failure to fetch, shown above the sections
// until a fetch succeeds; the last data stays, marked stale.
let fetchError = null;

function fetchFailed(status, msg) {
  fetchError = { status, msg };
  document.body.dataset.stale = "true";
  renderErrors(lastNodes);
}

// ---- rendering ----

let lastNodes = [];

function render(ov) {
  fetchError = null;
  document.body.dataset.stale = "false";
  const nodes = ov.nodes || [];
  lastNodes = nodes;
  updateRates(ov);
  renderNodes(nodes, ov.node);
  renderPolicies(ov.policies || []);
  renderShards(ov.shards || [], nodes, ov.under_replicated || []);
  renderRebalancing(ov);
  renderTop(ov.top_denied || []);
  renderFailOpen(ov.fail_open || [], ov.time);
  renderSummary(ov, nodes);
  renderErrors(nodes);
}

// updateRates turns the change in each policy's totals since the last
// overview into per-second rates. A total that went down (a node
// restarted, or stopped answering and left the sum) gives no rate for
// that interval rather than a negative one.
function updateRates(ov) {
  const t = Date.parse(ov.time);
  const totals = new Map((ov.policies || []).map((p) => [p.id, p]));
  if (prev && t > prev.time) {
    const dt = (t - prev.time) / 1000;
    const next = new Map();
    for (const [id, p] of totals) {
      const q = prev.totals.get(id);
      if (!q) continue;
      const r = {};
      for (const f of ["allowed", "denied", "shadow_would_deny"]) {
        r[f] = p[f] >= q[f] ? (p[f] - q[f]) / dt : null;
      }
      next.set(id, r);
    }
    rates = next;
  }
  // An overview with the same time (one shared answer) keeps the rates.
  if (!prev || t > prev.time) prev = { time: t, totals };
}

function isDown(n) {
  return n.state === "dead" || !n.reachable;
}

function renderNodes(nodes, answering) {
  const maxVersion = Math.max(0, ...nodes.map((n) => n.policy_version));
  const rows = nodes.map((n) => {
    const down = isDown(n) && n.state !== "left";
    const l = n.leases || {};
    const lookups = (l.hits || 0) + (l.misses || 0);
    const tr = row({
      node: n.id, state: n.state, membership: n.membership, reachable: n.reachable,
      ready: n.ready, policyVersion: n.policy_version, down,
      leaseBuckets: l.buckets, leaseHeld: l.held, leaseHits: l.hits, leaseMisses: l.misses,
    }, [
      n.id === answering ? [n.id, " ", el("span", "tag", "this node")] : n.id,
      badge(n.state, stateTone(n.state)),
      n.membership,
      n.reachable ? "yes" : withTitle(badge("no", "bad"), n.error || ""),
      n.ready ? "yes" : badge("no", "warn"),
      numCell(n.policy_version, n.policy_version < maxVersion ? "behind" : ""),
      numCell(l.buckets), numCell(l.held),
      numCell(lookups ? pct(l.hits / lookups) : "–"),
      el("span", "mono", n.rpc_addr), el("span", "mono", n.http_addr),
    ]);
    tr.className = down ? "down" : n.state === "suspect" ? "suspect" : n.state === "left" ? "gone" : "";
    return tr;
  });
  fill("nodes", rows, 11, "no members known");
}

function stateTone(state) {
  return { alive: "ok", suspect: "warn", dead: "bad", left: "muted" }[state] || "warn";
}

function renderPolicies(policies) {
  const rows = policies.map((p) => {
    const r = rates.get(p.id) || {};
    const shown = r.allowed != null && r.denied != null;
    const share = shown && r.allowed + r.denied > 0 ? r.denied / (r.allowed + r.denied) : null;
    return row({
      policy: p.id, mode: p.mode, allowed: p.allowed, denied: p.denied,
      shadowWouldDeny: p.shadow_would_deny, failOpen: p.fail_open, softOver: p.soft_over, throttled: p.throttled,
      allowedRate: rateAttr(r.allowed), deniedRate: rateAttr(r.denied),
    }, [
      p.id, badge(p.mode, p.mode === "SHADOW" ? "muted" : "plain"),
      numCell(fmtRate(r.allowed)), numCell(fmtRate(r.denied), r.denied > 0 ? "hot" : ""),
      shareBar(share),
      numCell(num.format(p.allowed)), numCell(num.format(p.denied)),
      numCell(num.format(p.shadow_would_deny)),
      numCell(num.format(p.fail_open), p.fail_open > 0 ? "hot" : ""),
      numCell(num.format(p.soft_over)),
      numCell(num.format(p.throttled || 0)),
    ]);
  });
  fill("policies", rows, 11, "no policies");
}

function renderShards(shards, nodes, under) {
  const downIDs = new Set(nodes.filter(isDown).map((n) => n.id));
  const underSet = new Set(under);
  const rows = shards.map((s) => {
    const replicas = s.replicas || [];
    const tr = row({
      shard: s.id, leader: s.leader, replicas: replicas.join(","), term: s.term,
      appliedIndex: s.applied_index, underReplicated: underSet.has(s.id),
    }, [
      numCell(s.id),
      s.leader ? badge(s.leader, downIDs.has(s.leader) ? "bad" : "plain") : badge("no leader", "bad"),
      replicas.map((id) => {
        const chip = badge(id, downIDs.has(id) ? "bad" : "plain");
        chip.dataset.replica = id;
        return chip;
      }),
      numCell(num.format(s.term)), numCell(num.format(s.applied_index)),
    ]);
    if (!s.leader || underSet.has(s.id)) tr.className = "warn";
    return tr;
  });
  fill("shards", rows, 5, "no shards yet");
}

function renderRebalancing(ov) {
  const under = ov.under_replicated || [];
  const chips = under.map((id) => {
    const li = el("li", "badge bad", `shard ${id}`);
    li.dataset.underReplicated = id;
    return li;
  });
  const ul = document.getElementById("under");
  ul.replaceChildren(...(chips.length ? chips : [el("li", "muted", "none: every shard has all its replicas")]));
  fill("moves", (ov.moves || []).map((m) =>
    row({ move: m.shard, add: m.add, remove: m.remove }, [numCell(m.shard), m.add, m.remove])), 3, "none");
  fill("splits", (ov.splits || []).map((s) =>
    row({ splitParent: s.parent, splitChild: s.child, at: s.at },
      [numCell(s.parent), numCell(s.child), splitPoint(s.at)])), 3, "none");
}

// splitPoint shows where a split cuts the key's hash space: the hash, and
// how far along the space it is.
function splitPoint(at) {
  if (typeof at !== "bigint") return numCell(num.format(at));
  const share = Number((at * 10000n) >> 64n) / 100;
  return numCell(`0x${at.toString(16).padStart(16, "0")} (${share.toFixed(2)}%)`, "mono");
}

function renderTop(top) {
  fill("top", top.map((k) =>
    row({ topPolicy: k.policy, topKey: k.key, count: k.count, err: k.err },
      [k.policy, el("span", "mono", k.key), numCell(num.format(k.count)), numCell(k.err ? `±${num.format(k.err)}` : "")])),
  4, "no denials yet");
}

function renderFailOpen(events, now) {
  const t0 = Date.parse(now);
  fill("failopen", events.map((e) =>
    row({ event: e.request_id, eventNode: e.node, eventPolicy: e.policy, reason: e.reason, time: e.time, key: e.key },
      [withTitle(el("span", "", ago(t0 - Date.parse(e.time))), e.time), e.node, e.policy, e.reason,
        el("span", "mono", e.key), el("span", "mono", e.request_id)])),
  6, "none: every check had a store to decide it");
}

function renderSummary(ov, nodes) {
  const members = nodes.filter((n) => n.state !== "left");
  const alive = members.filter((n) => !isDown(n) && n.state === "alive").length;
  const shards = ov.shards || [];
  const led = shards.filter((s) => s.leader).length;
  const under = (ov.under_replicated || []).length;
  setStat("sum-nodes", `${alive} / ${members.length}`, { alive, total: members.length });
  setStat("sum-shards", `${led} / ${shards.length}`, { led, total: shards.length });
  setStat("sum-under", String(under), { count: under });
  setStat("skew", String(ov.policy_version_skew), { skew: ov.policy_version_skew });
  let allowed = 0, denied = 0, known = rates.size > 0;
  for (const r of rates.values()) {
    if (r.allowed == null || r.denied == null) { known = false; break; }
    allowed += r.allowed; denied += r.denied;
  }
  setStat("sum-allowed", known ? fmtRate(allowed) : "–", { rate: known ? rateAttr(allowed) : "" });
  setStat("sum-denied", known ? fmtRate(denied) : "–", { rate: known ? rateAttr(denied) : "" });
  document.getElementById("via").textContent = ov.node;
  document.getElementById("via").dataset.answering = ov.node;
  const updated = document.getElementById("updated");
  updated.textContent = new Date(ov.time).toLocaleTimeString();
  updated.dataset.time = ov.time;
  const [health, why] = healthOf(ov, members, alive, led, under);
  setHealth(health, why);
}

// healthOf names the cluster's state: critical when a shard cannot decide
// strictly (no leader), degraded when something is missing but every shard
// still decides, healthy otherwise.
function healthOf(ov, members, alive, led, under) {
  const shards = (ov.shards || []).length;
  if (led < shards) return ["critical", `${shards - led} shard(s) without a leader`];
  const why = [];
  if (alive < members.length) why.push(`${members.length - alive} node(s) not alive`);
  if (members.some((n) => n.reachable && !n.ready)) why.push("node(s) not ready");
  if (under > 0) why.push(`${under} shard(s) under-replicated`);
  if (ov.policy_version_skew > 0) why.push("policy versions differ");
  if ((ov.moves || []).length + (ov.splits || []).length > 0) why.push("rebalancing");
  return why.length ? ["degraded", why.join(" · ")] : ["healthy", ""];
}

function setHealth(health, why) {
  document.body.dataset.health = health;
  const b = document.getElementById("health");
  b.dataset.health = health;
  b.textContent = health;
  b.className = "badge " + ({ healthy: "ok", degraded: "warn", critical: "bad" }[health] || "muted");
  document.getElementById("health-why").textContent = why;
}

function renderErrors(nodes) {
  const items = [];
  if (fetchError) {
    const { status, msg } = fetchError;
    const li = el("li", "error");
    li.dataset.error = "fetch";
    li.dataset.status = status;
    if (status === 401) {
      li.append("overview failed: 401 — ", link("/ui/login", "log in again"));
    } else {
      li.textContent = status ? `overview failed: ${status} — ${msg}` : `overview failed: ${msg} — is this node up?`;
    }
    items.push(li);
    setHealth("unknown", "no fresh data");
  }
  for (const n of nodes.filter((n) => !n.reachable && n.state !== "left")) {
    const li = el("li", "error", `node ${n.id} unreachable${n.error ? ": " + n.error : ""}`);
    li.dataset.error = "node";
    li.dataset.errorNode = n.id;
    items.push(li);
  }
  const ul = document.getElementById("errors");
  ul.replaceChildren(...items);
  ul.hidden = items.length === 0;
}

// ---- helpers ----

// row makes a <tr> with the given data-* attributes (camelCase keys
// become data-kebab-case) and one <td> per cell.
function row(data, cells) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(data)) {
    tr.dataset[k] = v == null ? "" : String(v);
  }
  for (const c of cells) {
    const td = c instanceof HTMLTableCellElement ? c : document.createElement("td");
    if (td !== c) td.append(...(Array.isArray(c) ? c : [c ?? ""]));
    tr.append(td);
  }
  return tr;
}

function fill(id, rows, cols, empty) {
  if (!rows.length) {
    const td = el("td", "empty", empty);
    td.colSpan = cols;
    const tr = document.createElement("tr");
    tr.append(td);
    rows = [tr];
  }
  document.getElementById(id).replaceChildren(...rows);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = String(text);
  return e;
}

function badge(text, tone) {
  return el("span", `badge ${tone}`, text);
}

function numCell(v, cls) {
  const td = el("td", "num" + (cls ? " " + cls : ""), v ?? "");
  return td;
}

function withTitle(e, title) {
  e.title = title;
  return e;
}

function link(href, text) {
  const a = el("a", "", text);
  a.href = href;
  return a;
}

function shareBar(share) {
  const td = el("td", "share");
  if (share == null) {
    td.textContent = "–";
    return td;
  }
  const bar = el("span", "bar");
  const fillEl = el("span", "fill");
  fillEl.style.width = `${Math.round(share * 100)}%`;
  bar.append(fillEl);
  td.append(bar, " ", pct(share));
  return td;
}

function setStat(id, text, data) {
  const e = document.getElementById(id);
  e.textContent = text;
  for (const [k, v] of Object.entries(data)) e.dataset[k] = String(v);
}

function rateAttr(r) {
  return r == null ? "" : String(Math.round(r * 100) / 100);
}

function fmtRate(r) {
  if (r == null) return "–";
  return r < 10 ? r.toFixed(1) : num.format(Math.round(r));
}

function pct(x) {
  return `${(x * 100).toFixed(x < 0.1 ? 1 : 0)}%`;
}

function ago(ms) {
  if (!(ms >= 0)) return "just now";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

poll();
