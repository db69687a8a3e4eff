/* app.js -- the inventoryd dashboard: the admin API over fetch, live state over one
 * EventSource (GET /admin/events), nothing else. With an admin token configured
 * (/ui/config.json says so) the page asks for it, sends it as a Bearer header and
 * opens each stream with a single-use ticket from POST /admin/events/ticket. */
"use strict";

(function () {
  /* The comparison's two sides: each a SKU, a strategy and a number of segments. */
  const CMP = [
    { side: "a", sku: "cmp-a" },
    { side: "b", sku: "cmp-b" },
  ];
  const MAX_WATCH = 16;
  const SPARK_POINTS = 120; /* 30 s at 4 updates/s */
  const COUNTERS = [
    ["orders_confirmed", "confirmed"],
    ["orders_sold_out", "sold out"],
    ["orders_busy", "busy"],
    ["orders_replayed", "replayed"],
    ["lock_waits", "lock waits"],
    ["busy_skips", "busy skips"],
    ["fall_throughs", "fall-throughs"],
    ["lease_renewals", "lease renewals"],
    ["fenced_rejections", "fenced rejections"],
    ["rebalances", "rebalances"],
  ];
  const RUN_OUTCOMES = [
    ["confirmed", "confirmed"],
    ["sold_out", "sold out"],
    ["busy", "busy"],
    ["replayed", "replayed"],
  ];
  const SKU_OUTCOMES = [
    ["orders_confirmed", "confirmed"],
    ["orders_sold_out", "sold out"],
    ["orders_busy", "busy"],
    ["orders_replayed", "replayed"],
  ];

  const $ = (sel, root) => (root || document).querySelector(sel);
  const state = {
    auth: "none",
    token: sessionStorage.getItem("inventoryd.token") || "",
    skus: [],
    selected: new Set(readHash()),
    es: null,
    esGen: 0,
    esTimer: 0,
    retry: 1000,
    cards: new Map(),
    spark: new Map(),
    updates: 0,
    last: null,
    waiters: [],
    /* What the comparison may pit (/ui/config.json): {mode, lock, available, why,
     * service} per strategy of the store in use. */
    strategies: [{ mode: "lock", available: true }],
  };

  /* ---- small helpers ---------------------------------------------------------- */

  function readHash() {
    const m = /(?:^#|&)watch=([^&]*)/.exec(location.hash);
    if (!m) return [];
    return decodeURIComponent(m[1]).split(",").filter((s) => /^[A-Za-z0-9_.-]{1,64}$/.test(s)).slice(0, MAX_WATCH);
  }

  function writeHash() {
    const list = [...state.selected].sort().join(",");
    const hash = list ? "#watch=" + encodeURIComponent(list).replace(/%2C/g, ",") : "";
    if (location.hash !== hash) history.replaceState(null, "", location.pathname + location.search + hash);
  }

  function fmt(n) {
    return typeof n === "number" ? n.toLocaleString("en-US") : "–";
  }

  function fmtRate(r) {
    if (typeof r !== "number") return "–";
    return r >= 100 ? Math.round(r).toLocaleString("en-US") : r.toFixed(1);
  }

  function reqId() {
    const rnd = new Uint32Array(2);
    crypto.getRandomValues(rnd);
    return "ui-" + Date.now().toString(36) + "-" + rnd[0].toString(36) + rnd[1].toString(36);
  }

  let toastTimer = 0;
  function toast(text, bad) {
    const t = $("#toast");
    t.textContent = text;
    t.classList.toggle("bad", !!bad);
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, bad ? 6000 : 3000);
  }

  function setConn(kind, text) {
    const c = $("#conn");
    c.dataset.state = kind;
    c.textContent = text;
  }

  class ApiError extends Error {}

  function failure(r) {
    const d = r.data || {};
    return new ApiError(d.error ? d.error + ": " + (d.detail || "") : "HTTP " + r.status);
  }

  /* One admin API call: {status, ok, data}. Never throws for an HTTP error; a network
   * error becomes status 0. */
  async function api(method, path, body, headers) {
    const h = Object.assign({}, headers || {});
    if (state.token) h.Authorization = "Bearer " + state.token;
    const init = { method, headers: h, cache: "no-store" };
    if (body !== undefined) {
      h["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      return { status: 0, ok: false, data: { error: "network", detail: String(e.message || e) } };
    }
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    if (res.status === 401 && state.auth === "bearer") showAuth("The token was not accepted.");
    return { status: res.status, ok: res.ok, data };
  }

  /* ---- updates and waiting for them ------------------------------------------- */

  function skuIn(u, name) {
    return u && Array.isArray(u.skus) ? u.skus.find((s) => s.sku === name) : undefined;
  }

  /* Resolve with the first update (from now on) for which pred(update) holds. */
  function waitFor(pred, ms) {
    return new Promise((resolve, reject) => {
      const w = { pred, resolve, timer: 0 };
      w.timer = setTimeout(() => {
        state.waiters = state.waiters.filter((x) => x !== w);
        reject(new ApiError("no live update within " + ms / 1000 + " s"));
      }, ms);
      state.waiters.push(w);
    });
  }

  function onUpdate(u) {
    state.last = u;
    state.updates++;
    document.body.dataset.tick = String(u.tick);
    document.body.dataset.updates = String(state.updates);
    renderCounters(u);
    renderCards(u);
    for (const w of state.waiters.slice()) {
      if (w.pred(u)) {
        clearTimeout(w.timer);
        state.waiters = state.waiters.filter((x) => x !== w);
        w.resolve(u);
      }
    }
  }

  /* ---- the event stream -------------------------------------------------------- */

  function reconnectLater() {
    clearTimeout(state.esTimer);
    state.esTimer = setTimeout(connect, state.retry);
    state.retry = Math.min(state.retry * 2, 15000);
  }

  async function connect() {
    clearTimeout(state.esTimer);
    const gen = ++state.esGen;
    if (state.es) {
      state.es.close();
      state.es = null;
    }
    if (state.auth === "bearer" && !state.token) {
      setConn("idle", "token needed");
      return;
    }
    const params = [...state.selected].sort().map((s) => "sku=" + encodeURIComponent(s));
    setConn("connecting", "connecting…");
    if (state.auth === "bearer") {
      /* EventSource cannot send headers: a single-use ticket goes in the URL. */
      const r = await api("POST", "/admin/events/ticket");
      if (gen !== state.esGen) return;
      if (!r.ok) {
        setConn("error", r.status === 401 ? "token rejected" : "offline");
        if (r.status !== 401) reconnectLater();
        return;
      }
      params.push("ticket=" + encodeURIComponent(r.data.ticket));
    }
    const es = new EventSource("/admin/events" + (params.length ? "?" + params.join("&") : ""));
    state.es = es;
    es.onopen = () => {
      if (state.es !== es) return;
      state.retry = 1000;
      setConn("live", "live");
    };
    es.onmessage = (ev) => {
      if (state.es !== es) return;
      let u;
      try {
        u = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      onUpdate(u);
    };
    es.addEventListener("shutdown", () => {
      if (state.es !== es) return;
      es.close();
      state.es = null;
      setConn("error", "server stopped");
      reconnectLater();
    });
    /* EventSource would retry with the same URL, whose ticket is spent: reconnect here
     * instead, with a new one. */
    es.onerror = () => {
      if (state.es !== es) return;
      es.close();
      state.es = null;
      setConn("error", "reconnecting…");
      reconnectLater();
    };
  }

  /* ---- counters ---------------------------------------------------------------- */

  function fillKv(dl, pairs) {
    if (dl.childElementCount !== pairs.length) {
      dl.textContent = "";
      for (const [key, label] of pairs) {
        const div = document.createElement("div");
        const dt = document.createElement("dt");
        const dd = document.createElement("dd");
        dt.textContent = label;
        dd.dataset.key = key;
        div.append(dt, dd);
        dl.append(div);
      }
    }
    return dl;
  }

  function renderCounters(u) {
    $("#c-orders").textContent = fmtRate(u.orders_per_s);
    $("#c-attempts").textContent = fmtRate(u.attempts_per_s);
    const pairs = COUNTERS.concat([["streams", "dashboards"]]);
    const dl = fillKv($("#c-list"), pairs);
    for (const dd of dl.querySelectorAll("dd")) {
      const k = dd.dataset.key;
      dd.textContent = k === "streams" ? fmt(u.streams && u.streams.open) : fmt(u.stats && u.stats[k]);
    }
  }

  /* ---- SKU cards --------------------------------------------------------------- */

  function makeCard(name) {
    const el = $("#card-tpl").content.firstElementChild.cloneNode(true);
    el.dataset.sku = name;
    $(".name", el).textContent = name;
    $(".bars", el).setAttribute("aria-label", "segments of " + name);
    const card = { el, nbars: 0 };
    state.cards.set(name, card);
    return card;
  }

  function renderBars(card, s) {
    const bars = $(".bars", card.el);
    const n = s.segment_stock.length;
    if (card.nbars !== n) {
      bars.textContent = "";
      for (let i = 0; i < n; i++) {
        const b = document.createElement("div");
        b.className = "bar";
        const sold = document.createElement("span");
        sold.className = "sold";
        const stock = document.createElement("span");
        stock.className = "stock";
        b.append(sold, stock);
        bars.append(b);
      }
      card.nbars = n;
    }
    let max = 1;
    for (let i = 0; i < n; i++) max = Math.max(max, s.segment_stock[i] + s.segment_sold[i]);
    const locked = s.segment_locked || [];
    for (let i = 0; i < n; i++) {
      const b = bars.children[i];
      const stock = s.segment_stock[i];
      const sold = s.segment_sold[i];
      const ps = (stock / max) * 100;
      const po = (sold / max) * 100;
      b.children[1].style.height = ps + "%";
      b.children[0].style.bottom = ps + "%";
      b.children[0].style.height = po + "%";
      b.dataset.stock = String(stock);
      b.dataset.sold = String(sold);
      b.dataset.locked = locked[i] ? "true" : "false";
      b.classList.toggle("locked", !!locked[i]);
      b.classList.toggle("empty", stock === 0);
      b.title = "segment " + i + ": " + stock + " left, " + sold + " sold" + (locked[i] ? ", lock held" : "");
    }
  }

  function renderSpark(card, s) {
    let pts = state.spark.get(s.sku);
    if (!pts) state.spark.set(s.sku, (pts = []));
    pts.push(typeof s.orders_per_s === "number" ? s.orders_per_s : 0);
    if (pts.length > SPARK_POINTS) pts.shift();
    const max = Math.max(1, ...pts);
    const step = 240 / (SPARK_POINTS - 1);
    const off = SPARK_POINTS - pts.length;
    const coords = pts.map((v, i) => ((off + i) * step).toFixed(1) + "," + (38 - (v / max) * 36).toFixed(1));
    $(".spark polyline", card.el).setAttribute("points", coords.join(" "));
    $(".f-peak", card.el).textContent = fmtRate(Math.max(0, ...pts));
  }

  function renderCard(card, s) {
    const el = card.el;
    const err = $(".error", el);
    if (s.error) {
      el.dataset.error = s.error;
      err.textContent = s.error === "unknown_sku" ? "This SKU does not exist (any more)." : s.error + ": " + (s.detail || "");
      err.hidden = false;
      return;
    }
    delete el.dataset.error;
    err.hidden = true;
    el.dataset.remaining = String(s.remaining);
    el.dataset.sold = String(s.sold);
    el.dataset.reserved = String(s.reserved || 0);
    el.dataset.initial = String(s.initial);
    el.dataset.orders = String(s.orders);
    el.dataset.locks = String(s.locks_held);
    el.dataset.segments = String(s.segments);
    el.dataset.mode = s.mode;
    if (s.lock) el.dataset.lock = s.lock;
    else delete el.dataset.lock;
    el.dataset.fencing = String(s.fencing !== false);
    el.dataset.holdMs = String(s.hold_ms);
    el.dataset.rebalance = String(!!s.rebalance);
    $(".meta", el).textContent = skuStrategy(s) + " · " + s.segments + (s.segments === 1 ? " segment" : " segments") + " · hold " + s.hold_ms + " ms";
    $(".f-remaining", el).textContent = fmt(s.remaining);
    $(".f-initial", el).textContent = fmt(s.initial);
    $(".f-sold", el).textContent = fmt(s.sold);
    $(".f-reserved", el).textContent = fmt(s.reserved || 0);
    $(".f-rate", el).textContent = fmtRate(s.orders_per_s);
    $(".f-locks", el).textContent = fmt(s.locks_held);
    $(".progress span", el).style.width = (s.initial > 0 ? (s.sold / s.initial) * 100 : 0) + "%";
    el.classList.toggle("soldout", s.remaining === 0);
    renderBars(card, s);
    renderSpark(card, s);

    const sim = s.simulation;
    const badge = $(".sim", el);
    const running = !!sim && (sim.state === "running" || sim.state === "stopping");
    if (sim) {
      badge.hidden = false;
      badge.dataset.state = sim.state;
      badge.textContent = "simulation " + sim.state + " · " + fmt(sim.answered) + "/" + fmt(sim.orders) +
        " orders · " + (sim.elapsed_ms / 1000).toFixed(1) + " s";
      el.dataset.sim = sim.state;
    } else {
      badge.hidden = true;
      delete el.dataset.sim;
    }
    $(".a-stop", el).hidden = !running || sim.state !== "running";
    const dl = $(".outcomes", el);
    const pairs = (sim ? RUN_OUTCOMES : SKU_OUTCOMES).map(([k, label]) => [k, (sim ? "run " : "") + label]);
    if (dl.dataset.kind !== (sim ? "run" : "sku")) {
      dl.textContent = "";
      dl.dataset.kind = sim ? "run" : "sku";
    }
    fillKv(dl, pairs);
    const src = sim ? sim.outcomes : s.outcomes || {};
    for (const dd of dl.querySelectorAll("dd")) dd.textContent = fmt(src[dd.dataset.key] || 0);
  }

  function renderCards(u) {
    const seen = new Set();
    const box = $("#cards");
    for (const s of u.skus || []) {
      seen.add(s.sku);
      const card = state.cards.get(s.sku) || makeCard(s.sku);
      if (card.el.parentNode !== box) box.append(card.el);
      renderCard(card, s);
    }
    for (const [name, card] of state.cards) {
      if (!seen.has(name)) {
        card.el.remove();
        state.cards.delete(name);
        state.spark.delete(name);
      }
    }
    /* Keep the cards in the stream's (sorted) order. */
    for (const s of u.skus || []) box.append(state.cards.get(s.sku).el);
    $("#empty").hidden = (u.skus || []).length > 0;
    renderComparison(u);
  }

  /* A SKU's strategy as the stream gives it: its mode, and its lock in mode lock. */
  function skuStrategy(s) {
    return strategyName({ mode: s.mode, lock: s.lock });
  }

  /* The comparison's outcome in one line per SKU: units sold, in how long, how fast. */
  function renderComparison(u) {
    const rows = CMP.map((c) => [c, skuIn(u, c.sku)]).filter(([, s]) => s && !s.error && s.simulation);
    const ul = $("#cmp-result");
    ul.hidden = rows.length === 0;
    ul.textContent = "";
    for (const [c, s] of rows) {
      const secs = s.simulation.elapsed_ms / 1000;
      const li = document.createElement("li");
      const name = document.createElement("span");
      const what = document.createElement("span");
      li.dataset.sku = s.sku;
      name.className = "strategy";
      name.textContent = c.side.toUpperCase() + " · " + skuStrategy(s) + " · " + s.segments +
        (s.segments === 1 ? " segment" : " segments");
      what.textContent = (s.remaining === 0 ? "sold out" : fmt(s.sold) + " sold") + " in " +
        secs.toFixed(1) + " s · " + fmt(Math.round(s.sold / Math.max(secs, 0.001))) + "/s";
      li.append(name, what);
      ul.append(li);
    }
  }

  /* ---- the strategies -------------------------------------------------------- */

  function strategyName(st) {
    return st.mode === "atomic" ? "atomic (no lock)" : "lock · " + (st.lock || "store");
  }

  /* The options of both sides' pickers: every strategy of the store, those whose lock
   * service this process was not started with greyed out, saying why. */
  function fillStrategies(cfg) {
    if (Array.isArray(cfg.strategies) && cfg.strategies.length) state.strategies = cfg.strategies;
    const first = state.strategies.findIndex((st) => st.available);
    for (const sel of document.querySelectorAll(".cmp-strategy")) {
      const keep = sel.value;
      sel.textContent = "";
      state.strategies.forEach((st, i) => {
        const o = document.createElement("option");
        o.value = String(i);
        o.dataset.mode = st.mode;
        if (st.lock) o.dataset.lock = st.lock;
        o.textContent = strategyName(st) + (st.available ? "" : " — " + (st.why || "unavailable"));
        o.disabled = !st.available;
        if (!st.available) o.title = st.why || "unavailable";
        sel.append(o);
      });
      const k = Number(keep);
      sel.value = keep !== "" && state.strategies[k] && state.strategies[k].available ? keep : String(Math.max(first, 0));
    }
    $("#cmp-store").textContent = "Store: " + (cfg.store || "redis") + ".";
    const ul = $("#cmp-unavailable");
    ul.textContent = "";
    for (const st of state.strategies.filter((x) => !x.available)) {
      const li = document.createElement("li");
      li.dataset.lock = st.lock || "";
      li.textContent = strategyName(st) + ": " + (st.why || "unavailable");
      ul.append(li);
    }
    ul.hidden = ul.childElementCount === 0;
  }

  /* A side's pick: its strategy and segments. */
  function pickOf(c) {
    const st = state.strategies[Number($("#cmp-" + c.side + "-strategy").value)] || state.strategies[0];
    return { st, segments: Number($("#cmp-" + c.side + "-segments").value) };
  }

  /* The PUT body of a SKU with strategy `st`: a lock service's SKU keeps its default,
   * no automatic rebalance, as the strategies were measured. */
  function skuBody(st, stock, segments) {
    const b = { stock, segments, mode: st.mode, hold_ms: 20, rebalance: !st.service, request_id: reqId() };
    if (st.mode === "lock" && st.lock) b.lock = st.lock;
    return b;
  }

  /* ---- the SKU list ------------------------------------------------------------ */

  async function refreshSkus() {
    /* The list comes in pages (next_cursor); follow them to the end. */
    const skus = [];
    let cursor = null;
    do {
      const q = "?limit=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      const r = await api("GET", "/admin/skus" + q);
      if (!r.ok) {
        if (r.status !== 401) toast("Cannot list SKUs: " + failure(r).message, true);
        return;
      }
      skus.push(...(r.data.skus || []));
      cursor = r.data.next_cursor || null;
    } while (cursor);
    state.skus = skus;
    const ul = $("#sku-list");
    ul.textContent = "";
    if (state.skus.length === 0) {
      const li = document.createElement("li");
      li.className = "none";
      li.textContent = "No SKUs yet.";
      ul.append(li);
    }
    for (const name of state.skus) {
      const li = document.createElement("li");
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = name;
      box.checked = state.selected.has(name);
      const text = document.createElement("span");
      text.textContent = name;
      label.append(box, text);
      li.append(label);
      ul.append(li);
    }
  }

  function watch(names, on) {
    let changed = false;
    for (const n of names) {
      if (on && !state.selected.has(n)) {
        if (state.selected.size >= MAX_WATCH) {
          toast("At most " + MAX_WATCH + " SKUs can be watched at once.", true);
          break;
        }
        state.selected.add(n);
        changed = true;
      } else if (!on && state.selected.delete(n)) {
        changed = true;
      }
    }
    for (const box of document.querySelectorAll("#sku-list input")) box.checked = state.selected.has(box.value);
    if (changed) {
      writeHash();
      connect();
    }
    return changed;
  }

  /* ---- admin actions ----------------------------------------------------------- */

  async function busy(button, fn) {
    if (button) button.disabled = true;
    try {
      await fn();
    } catch (e) {
      toast(e instanceof ApiError ? e.message : "Error: " + (e.message || e), true);
    } finally {
      if (button) button.disabled = false;
    }
  }

  async function expect(r, ...statuses) {
    if (!statuses.includes(r.status)) throw failure(r);
    return r.data;
  }

  function skuPath(name, rest) {
    return "/admin/skus/" + encodeURIComponent(name) + (rest || "");
  }

  function running(s) {
    return !!(s && s.simulation && (s.simulation.state === "running" || s.simulation.state === "stopping"));
  }

  async function runComparison(button) {
    const stock = Number($("#cmp-stock").value);
    const concurrency = Number($("#cmp-conc").value);
    const picks = CMP.map(pickOf);
    await busy(button, async () => {
      const names = CMP.map((c) => c.sku);
      const both = (u) => names.every((n) => skuIn(u, n));
      if (!watch(names, true) && !state.es) connect();
      let u = both(state.last) ? state.last : await waitFor(both, 5000);
      /* A run still going on either SKU is stopped first (its stream says so). */
      for (const n of names) {
        if (running(skuIn(u, n))) {
          if (skuIn(u, n).simulation.state === "running") await api("DELETE", skuPath(n, "/simulate"));
          u = await waitFor((x) => !running(skuIn(x, n)), 15000);
        }
      }
      /* Creates each SKU, or resets it: ?reset=true says a live sale may be replaced. */
      for (const [i, c] of CMP.entries()) {
        await expect(
          await api("PUT", skuPath(c.sku, "?reset=true"), skuBody(picks[i].st, stock, picks[i].segments)),
          200,
          201,
        );
      }
      const orders = Math.ceil(stock * 1.25);
      const started = await Promise.all(
        CMP.map((c) => api("POST", skuPath(c.sku, "/simulate"), { orders, concurrency, qty: 1 })),
      );
      for (const r of started) await expect(r, 202);
      toast("Selling " + fmt(stock) + " units twice (" + picks.map((p) => strategyName(p.st)).join(" vs ") + "): " +
        fmt(orders) + " orders each, " + concurrency + " at a time.");
      refreshSkus();
    });
  }

  function cardOf(target) {
    const el = target.closest(".card");
    return el ? { el, sku: el.dataset.sku } : null;
  }

  async function onCardSubmit(ev) {
    const c = cardOf(ev.target);
    if (!c) return;
    ev.preventDefault();
    const form = ev.target;
    const button = form.querySelector("button");
    if (form.classList.contains("a-restock")) {
      const qty = Number(form.elements.qty.value);
      await busy(button, async () => {
        await expect(await api("POST", skuPath(c.sku, "/restock"), { qty, request_id: reqId() }), 200);
        toast("Restocked " + c.sku + " with " + fmt(qty) + " units.");
      });
    } else if (form.classList.contains("a-sim")) {
      const orders = Number(form.elements.orders.value);
      const concurrency = Number(form.elements.concurrency.value);
      await busy(button, async () => {
        await expect(await api("POST", skuPath(c.sku, "/simulate"), { orders, concurrency, qty: 1 }), 202);
        toast("Simulating " + fmt(orders) + " orders on " + c.sku + ".");
      });
    }
  }

  async function onCardClick(ev) {
    const button = ev.target.closest("button");
    const c = button && cardOf(button);
    if (!c || button.type === "submit") return;
    const d = c.el.dataset;
    if (button.classList.contains("a-rebalance")) {
      await busy(button, async () => {
        await expect(await api("POST", skuPath(c.sku, "/rebalance"), undefined, { "Idempotency-Key": reqId() }), 200);
        toast("Rebalanced " + c.sku + ".");
      });
    } else if (button.classList.contains("a-reset")) {
      await busy(button, async () => {
        /* If-Match: * resets the SKU that is there, and never makes one deleted since. */
        await expect(
          await api("PUT", skuPath(c.sku), {
            stock: Number(d.initial), segments: Number(d.segments), mode: d.mode,
            hold_ms: Number(d.holdMs), rebalance: d.rebalance === "true", request_id: reqId(),
            ...(d.mode === "lock" && d.lock ? { lock: d.lock } : {}),
            ...(d.fencing === "false" ? { fencing: false } : {}),
          }, { "If-Match": "*" }),
          200,
        );
        toast("Reset " + c.sku + " to " + fmt(Number(d.initial)) + " units.");
      });
    } else if (button.classList.contains("a-delete")) {
      if (!button.classList.contains("armed")) {
        button.classList.add("armed");
        button.textContent = "Delete?";
        setTimeout(() => {
          button.classList.remove("armed");
          button.textContent = "Delete";
        }, 3000);
        return;
      }
      await busy(button, async () => {
        await expect(await api("DELETE", skuPath(c.sku), undefined, { "Idempotency-Key": reqId() }), 200);
        toast("Deleted " + c.sku + ".");
        watch([c.sku], false);
        refreshSkus();
      });
    } else if (button.classList.contains("a-stop")) {
      await busy(button, async () => {
        await expect(await api("DELETE", skuPath(c.sku, "/simulate")), 200);
      });
    }
  }

  async function onCreate(ev) {
    ev.preventDefault();
    const f = ev.target;
    const name = f.elements.sku.value.trim();
    await busy(f.querySelector("button"), async () => {
      await expect(
        await api("PUT", skuPath(name), {
          stock: Number(f.elements.stock.value), segments: Number(f.elements.segments.value),
          mode: f.elements.mode.value, hold_ms: Number(f.elements.hold_ms.value),
          rebalance: f.elements.rebalance.checked, request_id: reqId(),
        }),
        201, /* create only: an existing SKU is 409 sku_exists, shown as the error */
      );
      toast("Created " + name + ".");
      await refreshSkus();
      watch([name], true);
    });
  }

  /* ---- the token --------------------------------------------------------------- */

  function showAuth(message) {
    $("#auth").hidden = false;
    const e = $("#auth-error");
    e.hidden = !message;
    e.textContent = message || "";
    $("#token-btn").hidden = true;
  }

  async function onToken(ev) {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    const r = await api("GET", "/admin/skus");
    if (!r.ok) {
      if (r.status !== 401) showAuth("The service did not answer: " + failure(r).message);
      return;
    }
    sessionStorage.setItem("inventoryd.token", state.token);
    $("#token").value = "";
    $("#auth").hidden = true;
    $("#token-btn").hidden = false;
    await start();
  }

  /* ---- start ------------------------------------------------------------------- */

  async function start() {
    await refreshSkus();
    connect();
  }

  async function boot() {
    $("#compare-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      runComparison($("#cmp-run"));
    });
    $("#refresh").addEventListener("click", () => refreshSkus());
    $("#sku-list").addEventListener("change", (ev) => {
      if (ev.target.matches("input[type=checkbox]")) watch([ev.target.value], ev.target.checked);
    });
    $("#create-form").addEventListener("submit", onCreate);
    $("#cards").addEventListener("submit", onCardSubmit);
    $("#cards").addEventListener("click", onCardClick);
    $("#auth-form").addEventListener("submit", onToken);
    $("#token-btn").addEventListener("click", () => {
      state.token = "";
      sessionStorage.removeItem("inventoryd.token");
      if (state.es) state.es.close();
      state.es = null;
      setConn("idle", "token needed");
      showAuth("");
    });
    setInterval(() => {
      if (!document.hidden && (state.auth !== "bearer" || state.token)) refreshSkus();
    }, 10000);
    await loadConfig();
  }

  /* What the page must know first: whether the admin API wants a token. */
  async function loadConfig() {
    const r = await api("GET", "/ui/config.json");
    if (!r.ok || !r.data) {
      setConn("error", "offline");
      setTimeout(loadConfig, 3000);
      return;
    }
    state.auth = r.data.auth;
    fillStrategies(r.data);
    if (state.auth === "bearer" && !state.token) {
      showAuth("");
      setConn("idle", "token needed");
      return;
    }
    if (state.auth === "bearer") $("#token-btn").hidden = false;
    await start();
  }

  document.body.dataset.ready = "1";
  boot();
})();
