// tidegraph graph explorer: plain DOM and SVG over the HTTP query API (no build step).
// Every read goes through the API with the key typed in the header, so the page reaches
// exactly what that key reaches.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const W = 1000, H = 700;
  const state = { realm: null, head: 0, poll: null, center: null, edges: [] };

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

  function timeParams() {
    let believed = $("believed").value.trim();
    if (believed && !/(Z|[+-]\d\d:?\d\d)$/.test(believed)) believed += "Z";
    return { as_of: $("as-of").value || null, as_believed_at: believed || null };
  }

  // -- realms and the live panel -------------------------------------------------------

  async function loadRealms() {
    try {
      const { realms } = await api("/v1/realms");
      const select = $("realm");
      select.replaceChildren(...realms.map((r) => {
        const o = document.createElement("option");
        o.value = r.realm;
        o.textContent = `${r.realm} (${r.documents} docs, ${r.entities} entities)`;
        return o;
      }));
      const wanted = new URLSearchParams(location.search).get("realm");
      if (wanted && realms.some((r) => r.realm === wanted)) select.value = wanted;
      say(realms.length ? `${realms.length} realm(s)` : "this key reads no realm");
      if (realms.length) await useRealm(select.value);
    } catch (e) {
      say(e.message, true);
    }
  }

  async function useRealm(realm) {
    state.realm = realm;
    $("changes").replaceChildren();
    const page = await api(realmPath("/changes"), { limit: 1 });
    state.head = page.head_seq;
    if (state.poll) clearInterval(state.poll);
    state.poll = setInterval(pollChanges, 1000);
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

  async function draw() {
    if (!state.center) return;
    const types = $("types").value.split(",").map((t) => t.trim().toLowerCase().replace(/ /g, "_")).filter(Boolean);
    try {
      const { level, edges } = await neighbourhood(state.center, Number($("hops").value), types);
      state.edges = edges;
      render(level, edges);
      const t = timeParams();
      say(`${edges.length} relation(s) around ${state.center}` + (t.as_believed_at ? ` as believed at ${t.as_believed_at}` : ""));
    } catch (e) {
      say(e.message, true);
    }
  }

  function layout(level) {
    const rings = new Map();
    for (const [name, l] of level) {
      if (!rings.has(l)) rings.set(l, []);
      rings.get(l).push(name);
    }
    const pos = new Map();
    const maxRing = Math.max(1, ...rings.keys());
    for (const [l, names] of rings) {
      names.sort();
      const radius = l === 0 ? 0 : (Math.min(W, H) / 2 - 60) * (l / maxRing);
      names.forEach((name, i) => {
        const a = (2 * Math.PI * i) / names.length + l * 0.4;
        pos.set(name, [W / 2 + radius * Math.cos(a), H / 2 + radius * Math.sin(a)]);
      });
    }
    return pos;
  }

  function render(level, edges) {
    const svg = $("graph");
    svg.replaceChildren();
    const pos = layout(level);
    const pairCount = new Map();
    const edgeLayer = el("g", { class: "edges" }, svg);
    for (const r of edges) {
      const [x1, y1] = pos.get(r.subject);
      const [x2, y2] = pos.get(r.object);
      const pair = [r.subject, r.object].sort().join("\u0000");
      const k = pairCount.get(pair) || 0;
      pairCount.set(pair, k + 1);
      const bend = (k % 2 ? -1 : 1) * Math.ceil(k / 2) * 40;
      const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1;
      const cx = (x1 + x2) / 2 - (dy / len) * bend, cy = (y1 + y2) / 2 + (dx / len) * bend;
      const classes = ["edge", r.status === "current" ? "current" : "superseded"];
      if (r.negated) classes.push("negated");
      const g = el("g", { class: classes.join(" "), "data-id": r.id, "data-state": r.status,
        "data-fact": `${r.subject}|${r.predicate}|${r.object}`, "data-negated": String(r.negated) }, edgeLayer);
      const d = `M ${x1} ${y1} Q ${cx} ${cy} ${x2} ${y2}`;
      el("path", { d, fill: "none", class: "line" }, g);
      el("path", { d, fill: "none", class: "hit" }, g);
      const label = el("text", { x: (x1 + 2 * cx + x2) / 4, y: (y1 + 2 * cy + y2) / 4 - 4 }, g);
      label.textContent = `${r.negated ? "NOT " : ""}${r.predicate}${r.status === "current" ? "" : ` (${r.status})`}`;
      g.addEventListener("click", () => details(r, g));
    }
    const nodeLayer = el("g", { class: "nodes" }, svg);
    for (const [name, [x, y]] of pos) {
      const g = el("g", { class: level.get(name) === 0 ? "node center" : "node", "data-name": name }, nodeLayer);
      el("circle", { cx: x, cy: y, r: 9 }, g);
      const t = el("text", { x, y: y - 14 }, g);
      t.textContent = name;
      g.addEventListener("click", () => { $("entity").value = name; state.center = name; draw(); });
    }
  }

  // -- relation details ---------------------------------------------------------------

  function row(dl, term, value) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    dl.append(dt, dd);
    return dd;
  }

  async function details(r, g) {
    for (const s of document.querySelectorAll(".edge.selected")) s.classList.remove("selected");
    g.classList.add("selected");
    const box = $("details");
    const h = document.createElement("h2");
    h.textContent = `${r.subject} ${r.negated ? "NOT " : ""}${r.predicate} ${r.object}`;
    const dl = document.createElement("dl");
    dl.id = "relation-facts";
    row(dl, "id", r.id);
    row(dl, "state", r.status);
    row(dl, "valid", `${r.valid_from || "…"} – ${r.valid_to || "…"}`);
    row(dl, "believed", `${r.t_created} – ${r.t_expired || "now"}`);
    row(dl, "weight", String(r.weight));
    if (r.superseded_by) row(dl, "superseded by", r.superseded_by);
    row(dl, "space", r.space);
    const docs = document.createElement("ul");
    docs.id = "relation-docs";
    const passages = document.createElement("div");
    box.replaceChildren(h, dl, Object.assign(document.createElement("h2"), { textContent: "Documents" }), docs,
      Object.assign(document.createElement("h2"), { textContent: "Passages" }), passages);
    try {
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
    $("key").value = sessionStorage.getItem("tidegraph-key") || "";
    $("key").addEventListener("change", () => {
      sessionStorage.setItem("tidegraph-key", $("key").value.trim());
      loadRealms();
    });
    $("realm").addEventListener("change", () => useRealm($("realm").value));
    $("search").addEventListener("submit", search);
    $("time").addEventListener("submit", (e) => { e.preventDefault(); draw(); });
    $("export").addEventListener("submit", download);
    if (document.body.dataset.keys !== "true" || $("key").value) loadRealms();
    else say("enter an API key");
  });
})();
