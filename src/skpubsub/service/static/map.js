// skpubsub live map: written here, no library, no network beyond this server.
// Reads the admin key from the URL fragment (#key=...) or the form, trades it for a ticket
// (EventSource cannot send headers), loads /v1/admin/state, then follows /v1/admin/feed.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const MAX_OBJECTS = 600, MAX_NOTES = 40;
  const $ = (id) => document.getElementById(id);
  const svg = $("map");
  let space = [-180, -90, 180, 90], unit = 1, key = null;
  const subs = new Map();     // id -> {rec, el, links: Map(objId -> el), results: [ids]}
  const objs = new Map();     // id -> {x, y, el}  (newest object of that id)
  const objOrder = [];
  let nObjects = 0, nNotes = 0;

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function status(text) { $("status").textContent = text; }
  function auth() { return { Authorization: "Bearer " + key }; }
  const esc = (v) => JSON.stringify(v);

  function setSpace(text) {
    space = text.split(",").map(Number);
    const [x1, y1, x2, y2] = space;
    svg.setAttribute("viewBox", `${x1} ${-y2} ${x2 - x1} ${y2 - y1}`);
    unit = Math.max(x2 - x1, y2 - y1) / 360;
    drawGraticule();
  }

  function drawGraticule() {
    const g = $("graticule");
    g.replaceChildren();
    const [x1, y1, x2, y2] = space;
    const step = niceStep(Math.max(x2 - x1, y2 - y1) / 12);
    for (let x = Math.ceil(x1 / step) * step; x <= x2; x += step)
      el("line", { x1: x, y1: -y1, x2: x, y2: -y2, class: x === 0 ? "grat axis" : "grat" }, g);
    for (let y = Math.ceil(y1 / step) * step; y <= y2; y += step)
      el("line", { x1: x1, y1: -y, x2: x2, y2: -y, class: y === 0 ? "grat axis" : "grat" }, g);
    el("rect", { x: x1, y: -y2, width: x2 - x1, height: y2 - y1, class: "grat axis" }, g);
  }
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 3, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  async function drawCities() {
    try {
      const pts = await (await fetch("/v1/basemap")).json();
      const g = $("cities");
      const r = 0.35 * unit;
      for (const [x, y] of pts) el("circle", { cx: x, cy: -y, r: r, class: "city" }, g);
    } catch (e) { /* the graticule alone */ }
  }

  // -- subscriptions -------------------------------------------------------------------------
  function addSub(rec) {
    removeSub(rec.id);
    const g = $("subs");
    let e;
    if (rec.kind === "range") {
      const [x1, y1, x2, y2] = rec.rect;
      e = el("rect", { x: x1, y: -y2, width: Math.max(x2 - x1, unit * 0.3), height: Math.max(y2 - y1, unit * 0.3) }, g);
    } else {
      const r = 2.2 * unit;
      e = el("path", { d: `M${rec.x},${-rec.y - r}L${rec.x + r},${-rec.y}L${rec.x},${-rec.y + r}L${rec.x - r},${-rec.y}Z` }, g);
    }
    e.setAttribute("class", "sub " + rec.kind);
    e.dataset.id = esc(rec.id);
    const title = el("title", {}, e);
    title.textContent = `${rec.kind} ${esc(rec.id)}: ${(rec.keywords || []).join(" ")}`;
    const li = document.createElement("li");
    li.dataset.id = esc(rec.id);
    $("sublist").appendChild(li);
    const s = { rec, el: e, li, links: new Map(), results: [] };
    subs.set(esc(rec.id), s);
    setResults(s, rec.results || []);
    $("count-subs").textContent = subs.size;
  }
  function removeSub(id) {
    const s = subs.get(esc(id));
    if (!s) return;
    s.el.remove(); s.li.remove();
    for (const l of s.links.values()) l.remove();
    subs.delete(esc(id));
    $("count-subs").textContent = subs.size;
  }
  function setResults(s, ids) {
    s.results = ids;
    const kw = (s.rec.keywords || []).join(" ");
    if (s.rec.kind === "range") {
      s.li.textContent = `${esc(s.rec.id)} range [${s.rec.rect.join(", ")}] ${kw}`;
      return;
    }
    s.li.textContent = `${esc(s.rec.id)} ${s.rec.kind} k=${s.rec.k} ${kw} → `;
    const a = document.createElement("span");
    a.className = "results";
    a.textContent = ids.length ? ids.map(esc).join(", ") : "(none yet)";
    s.li.appendChild(a);
    for (const l of s.links.values()) l.remove();
    s.links.clear();
    for (const oid of ids) {
      const o = objs.get(esc(oid));
      if (!o) continue;
      s.links.set(esc(oid), el("line", { x1: s.rec.x, y1: -s.rec.y, x2: o.x, y2: -o.y, class: "link" }, $("links")));
    }
  }
  function flash(s) {
    s.el.classList.remove("flash");
    void s.el.getBoundingClientRect();  // restart the animation
    s.el.classList.add("flash");
    clearTimeout(s.timer);
    s.timer = setTimeout(() => s.el.classList.remove("flash"), 1200);
  }

  // -- objects and notifications ------------------------------------------------------------------
  function addObject(o) {
    const e = el("circle", { cx: o.x, cy: -o.y, r: 0.9 * unit, class: "obj" }, $("objs"));
    e.dataset.id = esc(o.id);
    el("title", {}, e).textContent = `${esc(o.id)}: ${(o.keywords || []).join(" ")}`;
    const prev = objs.get(esc(o.id));
    if (prev) prev.el.classList.add("old");
    objs.set(esc(o.id), { x: o.x, y: o.y, el: e });
    objOrder.push(e);
    while (objOrder.length > MAX_OBJECTS) objOrder.shift().remove();
    if (objOrder.length > 50) objOrder[objOrder.length - 51].classList.add("old");
    nObjects++;
    $("count-objects").textContent = nObjects;
  }
  function note(item) {
    const n = JSON.parse(item.note);
    const s = subs.get(esc(n.sub));
    nNotes++;
    $("count-notes").textContent = nNotes;
    const li = document.createElement("li");
    li.textContent = item.note;
    li.className = "fresh";
    setTimeout(() => li.classList.remove("fresh"), 1500);
    const list = $("notes");
    list.insertBefore(li, list.firstChild);
    while (list.children.length > MAX_NOTES) list.lastChild.remove();
    if (!s) return;
    flash(s);
    if ("object" in n) {
      const o = objs.get(esc(n.object));
      if (o) o.el.classList.add("matched");
    } else {
      const removed = new Set(n.removed.map(esc));
      const ids = s.results.filter((i) => !removed.has(esc(i))).concat(n.added);
      setResults(s, ids);
      for (const i of n.added) { const o = objs.get(esc(i)); if (o) o.el.classList.add("matched"); }
    }
  }
  function onItem(item) {
    if ("note" in item) return note(item);
    if (item.op === "pub") return addObject(item);
    if (item.op === "sub") return addSub(item);
    if (item.op === "unsub") return removeSub(item.id);
  }

  // -- metrics ---------------------------------------------------------------------------------
  function metric(text, name) {
    let sum = null;
    for (const line of text.split("\n")) {
      if (line.startsWith(name + " ") || line.startsWith(name + "{")) sum = (sum || 0) + Number(line.split(" ").pop());
    }
    return sum;
  }
  async function pollMetrics() {
    try {
      const t = await (await fetch("/metrics")).text();
      const fmt = (v, d) => (v === null ? "–" : v.toLocaleString(undefined, { maximumFractionDigits: d || 0 }));
      $("m-events").textContent = fmt(metric(t, "skpubsub_events_total"));
      $("m-rejected").textContent = fmt(metric(t, "skpubsub_rejected_total"));
      $("m-ops").textContent = fmt(metric(t, "skpubsub_objects_per_second"), 1);
      $("m-streams").textContent = fmt(metric(t, "skpubsub_sse_streams"));
    } catch (e) { /* next time */ }
  }

  // -- start -----------------------------------------------------------------------------------
  async function connect() {
    status("connecting…");
    const st = await fetch("/v1/admin/state", { headers: auth() });
    if (st.status === 401 || st.status === 403) {
      sessionStorage.removeItem("skpubsub-key");
      $("login").hidden = false;
      status("the admin key is needed");
      return;
    }
    const state = await st.json();
    setSpace(state.space);
    drawCities();
    for (const o of state.objects) addObject(o);
    for (const s of state.subscriptions) addSub(s);
    const { ticket } = await (await fetch("/v1/admin/ticket", { method: "POST", headers: auth() })).json();
    const es = new EventSource(`/v1/admin/feed?ticket=${encodeURIComponent(ticket)}&last_event_id=${state.feed}`);
    es.onopen = () => { status(`live · window ${state.window} · space ${state.space}`); document.body.dataset.live = "1"; };
    es.onerror = () => status("reconnecting…");
    es.onmessage = (m) => onItem(JSON.parse(m.data));
    pollMetrics();
    setInterval(pollMetrics, 2000);
  }

  const m = location.hash.match(/key=([^&]+)/);
  if (m) {
    key = decodeURIComponent(m[1]);
    sessionStorage.setItem("skpubsub-key", key);
    history.replaceState(null, "", location.pathname);  // the key leaves the address bar
  } else {
    key = sessionStorage.getItem("skpubsub-key");
  }
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    key = $("key").value.trim();
    sessionStorage.setItem("skpubsub-key", key);
    $("login").hidden = true;
    connect();
  });
  setSpace("-180,-90,180,90");
  if (key) connect(); else { $("login").hidden = false; status("the admin key is needed"); }
})();
