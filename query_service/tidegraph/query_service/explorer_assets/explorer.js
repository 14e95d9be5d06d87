// tidegraph graph explorer: plain DOM and SVG over the HTTP query API (no build step).
// Every read goes through the API with the key typed in the header, so the page reaches
// exactly what that key reaches. Layout and label placement live in layout.js.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const L = window.TidegraphLayout;
  const state = { realm: null, head: 0, poll: null, center: null, edges: [], selected: null };
  const keysRequired = () => document.body.dataset.keys === "true";

  function say(text, error) {
    const s = $("status");
    s.textContent = text;
    s.className = error ? "error" : "";
  }

  function authHeaders() {
    const key = $("key").value.trim();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  async function api(path, params, body) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
    }
    const init = { headers: authHeaders() };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(url, init);
    const data = await r.json().catch(() => null);
    if (!r.ok) {
      const e = data && data.error ? `${r.status} ${data.error.code}: ${data.error.message}` : `HTTP ${r.status}`;
      throw new Error(e);
    }
    return data;
  }

  const realmPath = (tail) => `/v1/realms/${encodeURIComponent(state.realm)}${tail}`;

  // The API reads both times (a year, month or date; belief time also an instant). A
  // date-time typed without an offset is read as UTC, as the field's hint says.
  function timeParams() {
    let believed = $("believed").value.trim();
    if (/T\d\d:\d\d(:\d\d(\.\d+)?)?$/.test(believed)) believed += "Z";
    return { as_of: $("as-of").value.trim() || null, as_believed_at: believed || null };
  }

  // -- realms, the key and the live panel ------------------------------------------------

  async function loadRealms() {
    try {
      const { realms } = await api("/v1/realms");
      const select = $("realm");
      const wanted = state.realm || new URLSearchParams(location.search).get("realm");
      select.replaceChildren(...realms.map((r) => {
        const o = document.createElement("option");
        o.value = r.realm;
        o.textContent = `${r.realm} (${r.documents} docs, ${r.entities} entities)`;
        return o;
      }));
      if (wanted && realms.some((r) => r.realm === wanted)) select.value = wanted;
      if (!realms.length) { say("this key reads no realm", true); return; }
      if (select.value !== state.realm) {
        say(`${realms.length} realm(s)`);
        await useRealm(select.value);
      }
    } catch (e) {
      say(e.message, true);
    }
  }

  async function useRealm(realm) {
    state.realm = realm;
    state.center = null;
    state.edges = [];
    $("graph").replaceChildren();
    $("changes").replaceChildren();
    const page = await api(realmPath("/changes"), { limit: 1 });
    state.head = page.head_seq;
    if (state.poll) clearInterval(state.poll);
    state.poll = setInterval(pollChanges, 1000);
  }

  let typing = null;
  function keyTyped(now) {
    clearTimeout(typing);
    typing = setTimeout(() => {
      sessionStorage.setItem("tidegraph-key", $("key").value.trim());
      state.realm = null;
      loadRealms();
    }, now ? 0 : 600);
  }

  function describe(c) {
    if (c.relation) {
      const r = c.relation;
      return `${r.subject} ${r.negated ? "NOT " : ""}${r.predicate} ${r.object}`;
    }
    if (c.entity) return c.entity.name;
    return c.doc_key || "";
  }

  let polling = false;
  async function pollChanges() {
    if (polling || !state.realm) return;
    polling = true;
    try {
      const page = await api(realmPath("/changes"), { after_seq: state.head, limit: 100 });
      const list = $("changes");
      for (const old of list.querySelectorAll(".fresh")) old.classList.remove("fresh");
      for (const c of page.changes) {
        const li = document.createElement("li");
        li.className = "fresh change";
        li.dataset.kind = c.kind;
        li.dataset.docKey = c.doc_key || "";
        li.textContent = `#${c.seq} ${c.kind.replace("_", " ")}: ${describe(c)}`;
        li.title = `${c.id} believed ${c.belief_time}`;
        list.prepend(li);
      }
      while (list.children.length > 200) list.lastChild.remove();
      state.head = page.next_seq;
      if (page.changes.length) {
        await loadRealms(); // counts in the realm menu
        if (state.center) await draw({ live: true });
      }
    } catch (e) {
      say(e.message, true);
    } finally {
      polling = false;
    }
  }

  // -- search and neighbourhood -------------------------------------------------------

  async function search(event) {
    event.preventDefault();
    if (!state.realm) return;
    const name = $("entity").value.trim();
    $("matches").replaceChildren();
    try {
      const { entities } = await api(realmPath("/entities"), { name, limit: 5 });
      if (entities.length) {
        state.center = entities[0].name;
        await draw();
        return;
      }
      const data = await api(realmPath("/query_data"), {}, { query: name, mode: "local", hops: 0, top_k: 5, space: "*" });
      say(data.entities.length ? "no exact match; did you mean:" : "no entity found", !data.entities.length);
      for (const e of data.entities) {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = e.name;
        b.addEventListener("click", () => { $("entity").value = e.name; state.center = e.name; draw(); });
        $("matches").append(b);
      }
    } catch (e) {
      say(e.message, true);
    }
  }

  async function neighbourhood(center, hops, types) {
    const level = new Map([[center, 0]]);
    const edges = new Map();
    let frontier = [center];
    for (let hop = 0; hop < hops && frontier.length; hop++) {
      const next = [];
      for (const name of frontier) {
        for (const side of ["subject", "object"]) {
          const { relations } = await api(realmPath("/relations"), {
            [side]: name, include_superseded: true, limit: 1000, ...timeParams(),
          });
          for (const r of relations) {
            if (types.length && !types.includes(r.predicate)) continue;
            edges.set(r.id, r);
            for (const n of [r.subject, r.object]) {
              if (!level.has(n)) { level.set(n, hop + 1); next.push(n); }
            }
          }
        }
      }
      frontier = next;
    }
    return { level, edges: [...edges.values()] };
  }

  function el(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (parent) parent.append(node);
    return node;
  }

  function canvasSize() {
    const svg = $("graph");
    const w = Math.max(320, Math.round(svg.clientWidth)), h = Math.max(240, Math.round(svg.clientHeight));
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    return { w, h };
  }

  function message(text, error) {
    const { w, h } = canvasSize();
    const svg = $("graph");
    svg.replaceChildren();
    const t = el("text", { x: w / 2, y: h / 2, class: error ? "message error" : "message" }, svg);
    t.textContent = text;
  }

  async function draw(options) {
    if (!state.center) return;
    const types = $("types").value.split(",").map((t) => t.trim().toLowerCase().replace(/ /g, "_")).filter(Boolean);
    try {
      const { level, edges } = await neighbourhood(state.center, Number($("hops").value), types);
      state.edges = edges;
      const t = timeParams();
      const when = (t.as_of ? ` valid ${t.as_of}` : "") + (t.as_believed_at ? ` as believed at ${t.as_believed_at}` : "");
      if (!edges.length) {
        message(`no relation of ${state.center}${when}`);
      } else {
        render(level, edges);
      }
      say(`${edges.length} relation(s) around ${state.center}${when}` + (options && options.live ? " (redrawn live)" : ""));
      if (state.selected) {
        const g = document.querySelector(`#graph .edge[data-id='${state.selected}']`);
        if (g) g.classList.add("selected");
      }
    } catch (e) {
      state.edges = [];
      message(e.message, true); // the last graph does not stay on screen under an error
      say(e.message, true);
    }
  }

  function measure(svg, cls, text) {
    const t = el("text", { class: cls, x: 0, y: 0 }, svg);
    t.textContent = text;
    const b = t.getBBox();
    return { node: t, size: { w: b.width, h: b.height }, dy: -(b.y + b.height / 2) };
  }

  function edgeText(r) {
    return `${r.negated ? "NOT " : ""}${r.predicate}${r.status === "current" ? "" : ` (${r.status})`}`;
  }

  function render(level, edges) {
    const { w, h } = canvasSize();
    const svg = $("graph");
    svg.replaceChildren();
    const edgeLayer = el("g", { class: "edges" }, svg);
    const nodeLayer = el("g", { class: "nodes" }, svg);
    const labelLayer = el("g", { class: "labels" }, svg);
    const nodeLabels = new Map(), edgeLabels = new Map();
    for (const name of level.keys()) nodeLabels.set(name, measure(labelLayer, "node-label", name));
    for (const r of edges) edgeLabels.set(r.id, measure(labelLayer, "edge-label", edgeText(r)));
    const widest = Math.max(...[...nodeLabels.values()].map((m) => m.size.w));
    const box = { x0: Math.min(widest / 2 + 12, w / 4), y0: 36, x1: w - Math.min(widest / 2 + 12, w / 4), y1: h - 48 };
    const pos = L.nodes(level, edges, state.center, box);
    const routes = L.routes(edges, pos);
    const sizes = (m) => new Map([...m].map(([k, v]) => [k, v.size]));
    const canvas = { x0: 2, y0: 2, x1: w - 2, y1: h - 30 };
    const { nodeAt, edgeAt } = L.labels(pos, routes, sizes(nodeLabels), sizes(edgeLabels), canvas);

    for (const r of edges) {
      const q = routes.get(r.id);
      const classes = ["edge", r.status === "current" ? "current" : "superseded"];
      if (r.negated) classes.push("negated");
      const g = el("g", { class: classes.join(" "), "data-id": r.id, "data-state": r.status,
        "data-fact": `${r.subject}|${r.predicate}|${r.object}`, "data-negated": String(r.negated) }, edgeLayer);
      const d = `M ${q.a.x} ${q.a.y} Q ${q.c.x} ${q.c.y} ${q.b.x} ${q.b.y}`;
      el("path", { d, fill: "none", class: "line" }, g);
      el("path", { d, fill: "none", class: "hit" }, g);
      const label = edgeLabels.get(r.id), spot = edgeAt.get(r.id);
      label.node.setAttribute("x", spot.x);
      label.node.setAttribute("y", spot.y + label.dy);
      label.node.dataset.id = r.id;
      label.node.addEventListener("click", () => details(r));
      g.addEventListener("click", () => details(r));
    }
    for (const [name, p] of pos) {
      const g = el("g", { class: level.get(name) === 0 ? "node center" : "node", "data-name": name }, nodeLayer);
      el("circle", { cx: p.x, cy: p.y, r: L.NODE_R }, g);
      const label = nodeLabels.get(name), spot = nodeAt.get(name);
      label.node.setAttribute("x", spot.x);
      label.node.setAttribute("y", spot.y + label.dy);
      const recenter = () => { $("entity").value = name; state.center = name; draw(); };
      g.addEventListener("click", recenter);
      label.node.addEventListener("click", recenter);
    }
  }

  // -- relation details: periods, belief history, sources --------------------------------

  function row(dl, term, value) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    if (typeof value === "string") dd.textContent = value; else dd.append(value);
    dl.append(dt, dd);
    return dd;
  }

  const factOf = (r) => `${r.subject} ${r.negated ? "NOT " : ""}${r.predicate} ${r.object}`;
  const shortTime = (t) => (t ? t.replace("T", " ").replace(/(\.\d{3})\d*Z$/, "$1").replace(/Z$/, "") : "now");

  function jumpLink(id, text) {
    const a = document.createElement("a");
    a.href = "#";
    a.className = "jump";
    a.dataset.id = id;
    a.textContent = text;
    a.addEventListener("click", (e) => { e.preventDefault(); jumpTo(id); });
    return a;
  }

  async function jumpTo(id) {
    let r = state.edges.find((x) => x.id === id);
    if (!r) {
      try {
        const { relation } = await api(realmPath(`/relations/${id}/history`));
        state.center = relation.subject;
        $("entity").value = relation.subject;
        await draw();
        r = state.edges.find((x) => x.id === id);
        if (!r) { say(`${factOf(relation)} is not drawn at this valid or belief time`, true); return; }
      } catch (e) {
        say(e.message, true);
        return;
      }
    }
    await details(r);
  }

  // Each interval (and each gap between two: not believed at all) gets a width by its
  // duration, but never less than a readable share: a state held for a second beside one
  // held for a year stays visible.
  function timeline(history) {
    const svg = el("svg", { id: "timeline", viewBox: "0 0 300 44", role: "img", "aria-label": "belief history" });
    if (!history.length) return svg;
    const pieces = [];
    history.forEach((i, n) => {
      const from = Date.parse(i.t_created), to = i.t_expired ? Date.parse(i.t_expired) : Date.now();
      if (n && from > pieces[pieces.length - 1].to) pieces.push({ state: "gap", from: pieces[pieces.length - 1].to, to: from });
      pieces.push({ state: i.state, from, to, interval: i });
    });
    const total = Math.max(pieces[pieces.length - 1].to - pieces[0].from, 1);
    const shares = pieces.map((p) => Math.max(0.12, (p.to - p.from) / total));
    const sum = shares.reduce((a, b) => a + b, 0);
    let x = 4;
    pieces.forEach((p, n) => {
      const width = (shares[n] / sum) * 292;
      if (p.state !== "gap") {
        const seg = el("rect", { x, y: 12, width: Math.max(width - 1, 2), height: 16, class: `segment ${p.state}`, "data-state": p.state }, svg);
        const title = el("title", {}, seg);
        title.textContent = `${p.state} ${shortTime(p.interval.t_created)} → ${shortTime(p.interval.t_expired)}`;
      }
      x += width;
    });
    const first = el("text", { x: 4, y: 42, class: "tick" }, svg);
    first.textContent = shortTime(history[0].t_created);
    const last = el("text", { x: 296, y: 42, class: "tick end" }, svg);
    last.textContent = history[history.length - 1].t_expired ? shortTime(history[history.length - 1].t_expired) : "now";
    return svg;
  }

  async function details(r) {
    state.selected = r.id;
    for (const s of document.querySelectorAll(".edge.selected")) s.classList.remove("selected");
    const g = document.querySelector(`#graph .edge[data-id='${r.id}']`);
    if (g) g.classList.add("selected");
    const box = $("details");
    const h = document.createElement("h2");
    h.textContent = factOf(r);
    const dl = document.createElement("dl");
    dl.id = "relation-facts";
    row(dl, "id", r.id);
    row(dl, "state", r.status);
    row(dl, "valid", `${r.valid_from || "…"} – ${r.valid_to || "…"}`);
    row(dl, "believed", `${shortTime(r.t_created)} – ${shortTime(r.t_expired)}`);
    row(dl, "weight", String(r.weight));
    const by = r.superseded_by ? row(dl, "superseded by", jumpLink(r.superseded_by, `relation ${r.superseded_by}`)) : null;
    if (by) by.id = "superseded-by";
    row(dl, "space", r.space);
    const history = document.createElement("ol");
    history.id = "relation-history";
    const docs = document.createElement("ul");
    docs.id = "relation-docs";
    const passages = document.createElement("div");
    const heading = (text) => Object.assign(document.createElement("h2"), { textContent: text });
    const chart = document.createElement("div");
    box.replaceChildren(h, dl, heading("Belief history"), chart, history, heading("Documents"), docs,
      heading("Passages"), passages);
    try {
      const found = await api(realmPath(`/relations/${r.id}/history`));
      chart.append(timeline(found.history));
      for (const i of found.history) {
        const li = document.createElement("li");
        li.dataset.state = i.state;
        li.append(`${i.state} ${shortTime(i.t_created)} → ${shortTime(i.t_expired)}`);
        if (i.superseded_by) li.append(" by ", jumpLink(i.superseded_by, `relation ${i.superseded_by}`));
        history.append(li);
      }
      if (r.superseded_by) {
        const later = state.edges.find((x) => x.id === r.superseded_by)
          || (await api(realmPath(`/relations/${r.superseded_by}/history`))).relation;
        for (const a of box.querySelectorAll(`a.jump[data-id='${r.superseded_by}']`)) a.textContent = factOf(later);
      }
      for (const key of r.doc_keys) {
        const doc = await api(realmPath(`/documents/${encodeURIComponent(key)}`), { space: r.space });
        const li = document.createElement("li");
        li.textContent = `${key}${doc.title ? ` — ${doc.title}` : ""} (${doc.status}, indexed ${doc.indexed_at})`;
        docs.append(li);
      }
      const data = await api(realmPath("/query_data"), {}, {
        query: `${r.subject} ${r.predicate.replace(/_/g, " ")} ${r.object}`, mode: "naive", top_k: 10, space: r.space,
      });
      for (const c of data.chunks.filter((c) => r.doc_keys.includes(c.doc_key))) {
        const q = document.createElement("blockquote");
        q.textContent = `${c.text} [${c.citation}]`;
        passages.append(q);
      }
    } catch (e) {
      say(e.message, true);
    }
  }

  // -- download -------------------------------------------------------------------------

  // The export route streams the file; it is fetched with the key, like every read, and
  // handed to the browser as a download under the name the service gives it.
  async function download(e) {
    e.preventDefault();
    if (!state.realm) return;
    const url = new URL(realmPath("/export"), location.origin);
    const params = { format: $("export-format").value, ...timeParams() };
    for (const [k, v] of Object.entries(params)) if (v) url.searchParams.set(k, v);
    say("exporting…");
    try {
      const r = await fetch(url, { headers: authHeaders() });
      if (!r.ok) {
        const data = await r.json().catch(() => null);
        throw new Error(data && data.error ? `${r.status} ${data.error.code}: ${data.error.message}` : `HTTP ${r.status}`);
      }
      const name = /filename="([^"]+)"/.exec(r.headers.get("content-disposition") || "");
      const link = document.createElement("a");
      link.href = URL.createObjectURL(await r.blob());
      link.download = name ? name[1] : `${state.realm}.${params.format}`;
      link.click();
      URL.revokeObjectURL(link.href);
      say(`downloaded ${link.download}`);
    } catch (err) {
      say(err.message, true);
    }
  }

  // -- wiring ---------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    const key = $("key");
    key.placeholder = keysRequired() ? "required: this service checks keys" : "none needed on loopback";
    key.title = "applied as you type (or on Enter)";
    key.value = sessionStorage.getItem("tidegraph-key") || "";
    key.addEventListener("input", () => keyTyped(false));
    key.addEventListener("keydown", (e) => { if (e.key === "Enter") keyTyped(true); });
    $("realm").addEventListener("change", () => useRealm($("realm").value));
    $("search").addEventListener("submit", search);
    $("time").addEventListener("submit", (e) => { e.preventDefault(); draw(); });
    $("export").addEventListener("submit", download);
    let resized = null;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(() => { if (state.center && state.edges.length) draw(); }, 300);
    });
    if (!keysRequired() || key.value) loadRealms();
    else say("enter an API key (this service checks keys)");
  });
})();
