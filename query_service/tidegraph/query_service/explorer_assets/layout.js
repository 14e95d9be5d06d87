// tidegraph explorer: where nodes, edges and labels go. Plain geometry, no DOM: the page
// measures label sizes and hands them in, so placements can be checked against the boxes
// drawn. Deterministic: the same neighbourhood on the same canvas is laid out the same way.
"use strict";

window.TidegraphLayout = (() => {
  const NODE_R = 9;
  const CLEAR = NODE_R + 16; // how near an edge may pass an unrelated node's centre
  const PAD = 3; // space kept between two labels

  // -- nodes: rings by hop, then a force-directed settle, then fitted to the canvas ---------

  function initial(levels, box) {
    const rings = new Map();
    for (const [name, level] of levels) {
      if (!rings.has(level)) rings.set(level, []);
      rings.get(level).push(name);
    }
    const maxRing = Math.max(1, ...rings.keys());
    const cx = (box.x0 + box.x1) / 2, cy = (box.y0 + box.y1) / 2;
    const pos = new Map();
    for (const [level, names] of rings) {
      names.sort();
      const rx = ((box.x1 - box.x0) / 2) * (level / maxRing);
      const ry = ((box.y1 - box.y0) / 2) * (level / maxRing);
      names.forEach((name, i) => {
        const a = (2 * Math.PI * i) / names.length + level * 0.4;
        pos.set(name, { x: cx + rx * Math.cos(a), y: cy + ry * Math.sin(a) });
      });
    }
    return pos;
  }

  function segmentDistance(p, a, b) {
    const dx = b.x - a.x, dy = b.y - a.y;
    const len2 = dx * dx + dy * dy || 1;
    const t = Math.max(0, Math.min(1, ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2));
    const qx = a.x + t * dx, qy = a.y + t * dy;
    return { d: Math.hypot(p.x - qx, p.y - qy), qx, qy };
  }

  function settle(pos, pairs, center, box) {
    const names = [...pos.keys()];
    const area = (box.x1 - box.x0) * (box.y1 - box.y0);
    const k = Math.sqrt(area / Math.max(names.length, 1)) * 0.8;
    let heat = Math.min(box.x1 - box.x0, box.y1 - box.y0) / 6;
    for (let round = 0; round < 400; round++) {
      const move = new Map(names.map((n) => [n, { x: 0, y: 0 }]));
      for (let i = 0; i < names.length; i++) {
        for (let j = i + 1; j < names.length; j++) {
          const a = pos.get(names[i]), b = pos.get(names[j]);
          let dx = a.x - b.x, dy = a.y - b.y;
          let d = Math.hypot(dx, dy);
          if (d < 0.01) { dx = Math.cos(i + j); dy = Math.sin(i + j); d = 1; }
          const f = (k * k) / d;
          move.get(names[i]).x += (dx / d) * f; move.get(names[i]).y += (dy / d) * f;
          move.get(names[j]).x -= (dx / d) * f; move.get(names[j]).y -= (dy / d) * f;
        }
      }
      for (const [s, o] of pairs) {
        const a = pos.get(s), b = pos.get(o);
        const dx = a.x - b.x, dy = a.y - b.y, d = Math.hypot(dx, dy) || 0.01;
        const f = (d * d) / k;
        move.get(s).x -= (dx / d) * f; move.get(s).y -= (dy / d) * f;
        move.get(o).x += (dx / d) * f; move.get(o).y += (dy / d) * f;
      }
      // an edge passing close to a node it does not join pushes that node aside
      for (const [s, o] of pairs) {
        for (const n of names) {
          if (n === s || n === o) continue;
          const p = pos.get(n);
          const { d, qx, qy } = segmentDistance(p, pos.get(s), pos.get(o));
          if (d < k * 0.6) {
            const push = (k * 0.6 - d) * 2;
            const ux = (p.x - qx) / (d || 1), uy = (p.y - qy) / (d || 1);
            move.get(n).x += (d ? ux : 1) * push * k / 10;
            move.get(n).y += (d ? uy : 0) * push * k / 10;
          }
        }
      }
      for (const n of names) {
        if (n === center) continue;
        const m = move.get(n), d = Math.hypot(m.x, m.y) || 1;
        const p = pos.get(n);
        p.x = Math.max(box.x0, Math.min(box.x1, p.x + (m.x / d) * Math.min(d, heat)));
        p.y = Math.max(box.y0, Math.min(box.y1, p.y + (m.y / d) * Math.min(d, heat)));
      }
      heat = Math.max(heat * 0.985, 0.5);
    }
  }

  function fit(pos, box) {
    const xs = [...pos.values()].map((p) => p.x), ys = [...pos.values()].map((p) => p.y);
    const [minX, maxX, minY, maxY] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    for (const p of pos.values()) {
      p.x = maxX - minX < 1 ? (box.x0 + box.x1) / 2 : box.x0 + ((p.x - minX) / (maxX - minX)) * (box.x1 - box.x0);
      p.y = maxY - minY < 1 ? (box.y0 + box.y1) / 2 : box.y0 + ((p.y - minY) / (maxY - minY)) * (box.y1 - box.y0);
    }
  }

  function nodes(levels, edges, center, box) {
    const pos = initial(levels, box);
    const pairs = [...new Set(edges.map((e) => [e.subject, e.object].sort().join("\u0000")))]
      .map((key) => key.split("\u0000"));
    if (pos.size > 1) {
      settle(pos, pairs, center, box);
      fit(pos, box);
    }
    return pos;
  }

  // -- edges: a quadratic curve each, bent apart on a shared pair and around other nodes -------

  function curve(a, b, bend) {
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
    const nx = -dy / len, ny = dx / len;
    // the curve's midpoint lies halfway between the chord's midpoint and the control point
    const c = { x: (a.x + b.x) / 2 + nx * 2 * bend, y: (a.y + b.y) / 2 + ny * 2 * bend };
    return { a, c, b };
  }

  function at(q, t) {
    const u = 1 - t;
    return {
      x: u * u * q.a.x + 2 * u * t * q.c.x + t * t * q.b.x,
      y: u * u * q.a.y + 2 * u * t * q.c.y + t * t * q.b.y,
    };
  }

  function nearest(q, pos, ends) {
    let best = Infinity;
    for (const [name, p] of pos) {
      if (ends.includes(name)) continue;
      for (let i = 1; i < 40; i++) {
        const s = at(q, i / 40);
        best = Math.min(best, Math.hypot(s.x - p.x, s.y - p.y));
      }
    }
    return best;
  }

  function routes(edges, pos) {
    const byPair = new Map();
    for (const e of edges) {
      const key = [e.subject, e.object].sort().join("\u0000");
      if (!byPair.has(key)) byPair.set(key, []);
      byPair.get(key).push(e);
    }
    const out = new Map();
    for (const group of byPair.values()) {
      group.forEach((e, i) => {
        // one edge straight; several fanned out symmetrically, each side of the chord
        const base = group.length === 1 ? 0 : (i - (group.length - 1) / 2) * 40;
        const flip = e.subject > e.object ? -1 : 1; // bends are given in the sorted pair's frame
        let chosen = null, widest = -1;
        // a fanned edge bends further out on its own side only, never across its siblings
        const extras = base === 0 ? [0, 30, -30, 60, -60, 90, -90, 130, -130] : [0, 30, 60, 90, 130];
        for (const extra of extras) {
          const bend = (base === 0 ? extra : base + Math.sign(base) * extra) * flip;
          const q = curve(pos.get(e.subject), pos.get(e.object), bend);
          const clear = nearest(q, pos, [e.subject, e.object]);
          if (clear >= CLEAR) { chosen = q; break; }
          if (clear > widest) { widest = clear; chosen = q; }
        }
        out.set(e.id, chosen);
      });
    }
    return out;
  }

  // -- labels: node names first, then each edge's predicate at the first free place on it -----

  function boxAt(x, y, size) {
    return { x0: x - size.w / 2, y0: y - size.h / 2, x1: x + size.w / 2, y1: y + size.h / 2 };
  }

  function overlap(a, b) {
    const w = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) + PAD;
    const h = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) + PAD;
    return w > 0 && h > 0 ? w * h : 0;
  }

  function place(candidates, size, taken, canvas) {
    let best = null, least = Infinity;
    for (const [x, y] of candidates) {
      const b = boxAt(x, y, size);
      if (b.x0 < canvas.x0 || b.y0 < canvas.y0 || b.x1 > canvas.x1 || b.y1 > canvas.y1) continue;
      const hit = taken.reduce((sum, t) => sum + overlap(b, t), 0);
      if (hit === 0) return { x, y, box: b };
      if (hit < least) { least = hit; best = { x, y, box: b }; }
    }
    if (best) return best;
    const [x, y] = candidates[0];
    return { x, y, box: boxAt(x, y, size) };
  }

  function labels(pos, routesById, nodeSizes, edgeSizes, canvas) {
    const taken = [];
    for (const p of pos.values()) {
      taken.push({ x0: p.x - NODE_R, y0: p.y - NODE_R, x1: p.x + NODE_R, y1: p.y + NODE_R });
    }
    const nodeAt = new Map();
    for (const [name, p] of pos) {
      const s = nodeSizes.get(name);
      const gap = NODE_R + 3 + s.h / 2;
      const spots = [[p.x, p.y - gap], [p.x, p.y + gap], [p.x + NODE_R + 4 + s.w / 2, p.y],
        [p.x - NODE_R - 4 - s.w / 2, p.y], [p.x, p.y - gap - s.h], [p.x, p.y + gap + s.h]];
      const spot = place(spots, s, taken, canvas);
      taken.push(spot.box);
      nodeAt.set(name, spot);
    }
    const edgeAt = new Map();
    for (const [id, q] of routesById) {
      const s = edgeSizes.get(id);
      const spots = [];
      for (const t of [0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78]) {
        const p = at(q, t);
        for (const off of [0, -1, 1, -2, 2, -3, 3]) spots.push([p.x, p.y + off * (s.h * 0.75)]);
      }
      const spot = place(spots, s, taken, canvas);
      taken.push(spot.box);
      edgeAt.set(id, spot);
    }
    return { nodeAt, edgeAt };
  }

  return { NODE_R, CLEAR, nodes, routes, labels, at };
})();
