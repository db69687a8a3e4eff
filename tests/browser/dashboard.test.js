#!/usr/bin/env node
/* dashboard.test.js -- the dashboard in headless Chromium (puppeteer-core), against a
 * running inventoryd. tests/it_dashboard.c starts redis-server and the service (with an
 * admin token) and runs this; by hand:
 *
 *   node tests/browser/dashboard.test.js --url http://127.0.0.1:8080 [--token T]
 *        [--out build/dashboard] [--docs docs/dashboard.png] [--chromium /usr/bin/chromium]
 *
 * It opens /, enters the token when the page asks for it, runs the comparison with its
 * defaults (the store's lock on 1 segment vs 20) and checks: the bars match GET /admin/skus/{sku} within one update
 * while the SKUs drain; the 1-segment SKU drains over many updates, with its lock seen
 * held; the 20-segment SKU sells out first; both end sold out with the audit holding
 * (remaining + sold == initial, no segment below 0, orders == sold) and the page
 * showing exactly what the API says; a restock from the page shows within one update;
 * then picks two strategies other than the default on the page (the first two that
 * /ui/config.json calls available: with the service started with --redlock and
 * --memcached, RedLock and memcached), sees a lock service it was not started with
 * greyed out with why, runs the comparison again and checks that both SKUs carry
 * their strategy and sell exactly their stock, audited, the page agreeing;
 * and the console has no errors (nor failed requests). Screenshots (laptop and phone,
 * light and dark) go to --out; --docs copies the laptop one there.
 *
 * Prints one line per check ("ok ..." / "not ok ..."); exit 0 when all pass, 1 when
 * one fails, 2 on bad usage.
 */
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const puppeteer = require("puppeteer-core");

const LAPTOP = { width: 1366, height: 900, deviceScaleFactor: 1 };
/* Not isMobile: changing that makes Chromium reload the page, and the test watches one
 * page load from start to end. The layout depends on the width alone. */
const PHONE = { width: 390, height: 844, deviceScaleFactor: 2 };
const CMP_STOCK = 400;
const SKU1 = "cmp-a"; /* the comparison's side A: 1 segment by default */
const SKU20 = "cmp-b"; /* side B: 20 segments by default */
const PAIR_STOCK = 100; /* the second comparison: two strategies picked on the page */
const PAIR_SEGMENTS = 4;

function usage(msg) {
  process.stderr.write((msg ? msg + "\n" : "") +
    "usage: dashboard.test.js --url URL [--token T] [--out DIR] [--docs FILE] [--chromium PATH]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const o = { url: "", token: "", out: "build/dashboard", docs: "", chromium: "/usr/bin/chromium" };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, "");
    if (!(k in o) || i + 1 >= argv.length) usage("unknown or incomplete option " + argv[i]);
    o[k] = argv[++i];
  }
  if (!o.url) usage("--url is required");
  o.url = o.url.replace(/\/$/, "");
  return o;
}

const opt = parseArgs(process.argv.slice(2));
let failures = 0;

function ok(cond, what, detail) {
  if (cond) {
    console.log("ok - " + what);
  } else {
    failures++;
    console.log("not ok - " + what + (detail ? ": " + detail : ""));
  }
  return cond;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function getSku(name) {
  const res = await fetch(opt.url + "/admin/skus/" + name, {
    headers: opt.token ? { Authorization: "Bearer " + opt.token } : {},
  });
  if (res.status !== 200) throw new Error("GET /admin/skus/" + name + ": " + res.status);
  return res.json();
}

/* What the page shows: per card its figures and its bars. */
function readPage(page) {
  return page.evaluate(() => {
    const out = {
      updates: Number(document.body.dataset.updates || 0),
      tick: Number(document.body.dataset.tick || 0),
      skus: {},
    };
    for (const c of document.querySelectorAll(".card")) {
      const bars = [...c.querySelectorAll(".bar")];
      out.skus[c.dataset.sku] = {
        remaining: Number(c.dataset.remaining),
        sold: Number(c.dataset.sold),
        initial: Number(c.dataset.initial),
        orders: Number(c.dataset.orders),
        sim: c.dataset.sim || "",
        stock: bars.map((b) => Number(b.dataset.stock)),
        segSold: bars.map((b) => Number(b.dataset.sold)),
        locked: bars.map((b) => b.dataset.locked === "true"),
        heights: bars.map((b) => parseFloat(b.querySelector(".stock").style.height)),
      };
    }
    return out;
  });
}

/* Wait until the page has taken `n` more updates than `since`. */
async function waitUpdates(page, since, n, ms) {
  await page.waitForFunction((want) => Number(document.body.dataset.updates || 0) >= want,
    { timeout: ms, polling: 20 }, since + n);
}

/* One "within one update" check of `name`: page P1, then GET G, then the page after two
 * more updates (the first may have been read before G), P2. Stock only goes down and
 * sales only up during a sale, so G must lie between P1 and P2, segment by segment. */
async function matchWithinOneUpdate(page, name, label) {
  const p1 = await readPage(page);
  const g = await getSku(name);
  await waitUpdates(page, p1.updates, 2, 3000);
  const p2 = await readPage(page);
  const a = p1.skus[name];
  const b = p2.skus[name];
  const why = [];
  if (!a || !b) {
    why.push("no card for " + name);
  } else {
    if (!(a.remaining >= g.remaining && g.remaining >= b.remaining))
      why.push(`remaining ${a.remaining} / GET ${g.remaining} / ${b.remaining}`);
    if (!(a.sold <= g.sold && g.sold <= b.sold)) why.push(`sold ${a.sold} / GET ${g.sold} / ${b.sold}`);
    if (a.stock.length !== g.segments || b.stock.length !== g.segments)
      why.push(`bars ${a.stock.length}, ${b.stock.length} for ${g.segments} segments`);
    /* Segment by segment only without automatic rebalancing moving stock between
     * them, as on 1 segment. */
    if (g.segments === 1)
      for (let i = 0; i < g.segments; i++)
        if (!(a.stock[i] >= g.segment_stock[i] && g.segment_stock[i] >= b.stock[i]))
          why.push(`segment ${i}: ${a.stock[i]} / GET ${g.segment_stock[i]} / ${b.stock[i]}`);
  }
  return ok(why.length === 0, `${label}: ${name}'s bars match GET /admin/skus/${name} within one update`,
    why.join("; "));
}

/* Exact agreement, once nothing changes: after two more updates the page equals GET. */
async function matchExactly(page, name, label) {
  const g = await getSku(name);
  /* Nothing changes any more, so no further update need come: the last one came at
   * most one interval after the last change. Wait two and read. */
  await sleep(600);
  const p = (await readPage(page)).skus[name];
  const same = p && p.remaining === g.remaining && p.sold === g.sold && p.initial === g.initial &&
    p.orders === g.orders && JSON.stringify(p.stock) === JSON.stringify(g.segment_stock) &&
    JSON.stringify(p.segSold) === JSON.stringify(g.segment_sold);
  return ok(same, `${label}: ${name} on the page equals GET /admin/skus/${name}`,
    JSON.stringify({ page: p, get: { remaining: g.remaining, sold: g.sold, initial: g.initial, orders: g.orders, stock: g.segment_stock } }));
}

function audit(g, label) {
  const why = [];
  if (g.remaining + g.sold !== g.initial) why.push(`remaining ${g.remaining} + sold ${g.sold} != initial ${g.initial}`);
  if (g.segment_stock.some((s) => s < 0)) why.push("a segment below 0: " + JSON.stringify(g.segment_stock));
  if (g.segment_stock.reduce((a, b) => a + b, 0) !== g.remaining) why.push("segments do not sum to remaining");
  if (g.segment_sold.reduce((a, b) => a + b, 0) !== g.sold) why.push("segment_sold does not sum to sold");
  if (g.orders !== g.sold) why.push(`orders ${g.orders} != sold ${g.sold}`);
  return ok(why.length === 0, `${label}: audit of ${g.sku} (remaining + sold == initial, no segment < 0, orders == sold)`,
    why.join("; "));
}

async function screenshots(page, tag) {
  fs.mkdirSync(opt.out, { recursive: true });
  const shots = [];
  for (const [vp, vname] of [[LAPTOP, "laptop"], [PHONE, "phone"]]) {
    await page.setViewport(vp);
    for (const scheme of ["light", "dark"]) {
      await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: scheme }]);
      await sleep(150);
      const file = path.join(opt.out, `dashboard-${vname}-${scheme}${tag}.png`);
      await page.screenshot({ path: file, fullPage: vname === "phone" });
      shots.push(file);
    }
  }
  await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
  await page.setViewport(LAPTOP);
  return shots;
}

async function getConfig() {
  const res = await fetch(opt.url + "/ui/config.json");
  if (res.status !== 200) throw new Error("GET /ui/config.json: " + res.status);
  return res.json();
}

/* The second comparison: two strategies other than the default, picked on the page. */
async function pitTwoStrategies(page) {
  const cfg = await getConfig();
  const strategies = cfg.strategies || [];
  /* Greyed out: every strategy the service cannot run, with why, in both pickers. */
  const opts = await page.$$eval("#cmp-a-strategy option, #cmp-b-strategy option", (os) =>
    os.map((o) => ({ value: o.value, disabled: o.disabled, text: o.textContent, title: o.title })));
  const grey = strategies.map((s, i) => [s, i]).filter(([s]) => !s.available);
  ok(opts.length === 2 * strategies.length, "both pickers list every strategy of /ui/config.json",
    `${opts.length} options for ${strategies.length} strategies`);
  ok(grey.length > 0 && grey.every(([s, i]) => opts.filter((o) => o.value === String(i)).every(
    (o) => o.disabled && o.text.includes(s.why) && o.title === s.why)),
  "a lock service not started is greyed out in both pickers, saying why",
  JSON.stringify(grey.map(([s]) => s)) + " " + JSON.stringify(opts));
  const listed = await page.$$eval("#cmp-unavailable li", (ls) => ls.map((l) => l.textContent));
  ok(grey.every(([s]) => listed.some((t) => t.includes(s.lock) && t.includes(s.why))),
    "the unavailable ones are listed under the form with why", JSON.stringify(listed));

  const pick = strategies.map((s, i) => [s, i]).filter(([s, i]) => i > 0 && s.available).slice(0, 2);
  if (!ok(pick.length === 2, "two available strategies besides the default",
    JSON.stringify(strategies))) return;
  const sides = [["a", SKU1], ["b", SKU20]];
  for (const [k, [side]] of sides.entries()) {
    await page.select(`#cmp-${side}-strategy`, String(pick[k][1]));
    await page.$eval(`#cmp-${side}-segments`, (el, v) => { el.value = v; }, String(PAIR_SEGMENTS));
  }
  await page.$eval("#cmp-stock", (el, v) => { el.value = v; }, String(PAIR_STOCK));
  await page.$eval("#cmp-conc", (el) => { el.value = "16"; });
  const label = (s) => s.mode === "atomic" ? "atomic" : s.lock;
  const what = pick.map(([s]) => label(s)).join(" vs ");
  await page.click("#cmp-run");
  /* Both cards show the new strategy, sold out, their runs finished. */
  try {
    await page.waitForFunction((names, want, stock) => names.every((n, k) => {
      const c = document.querySelector(`.card[data-sku="${n}"]`);
      const d = c && c.dataset;
      return d && d.mode === want[k].mode && (want[k].mode !== "lock" || d.lock === want[k].lock) &&
        Number(d.initial) === stock && Number(d.remaining) === 0 && d.sim === "finished";
    }), { timeout: 60000, polling: 100 }, sides.map(([, n]) => n), pick.map(([s]) => s), PAIR_STOCK);
    ok(true, `${what}: both sold out on the page`);
  } catch (e) {
    const p = await readPage(page);
    ok(false, `${what}: both sold out on the page`, JSON.stringify([SKU1, SKU20].map((n) => p.skus[n])));
  }
  for (const [k, [, name]] of sides.entries()) {
    const s = pick[k][0];
    const g = await getSku(name);
    ok(g.mode === s.mode && (s.mode !== "lock" || g.lock === s.lock) && g.segments === PAIR_SEGMENTS,
      `${name} runs ${label(s)} on ${PAIR_SEGMENTS} segments`, `mode ${g.mode}, lock ${g.lock}, segments ${g.segments}`);
    ok(g.remaining === 0 && g.sold === PAIR_STOCK, `${name} (${label(s)}) sold exactly its ${PAIR_STOCK} units`,
      `remaining ${g.remaining}, sold ${g.sold}`);
    audit(g, label(s));
    await matchExactly(page, name, label(s));
  }
  const rows = await page.$$eval("#cmp-result li", (ls) => ls.map((l) => l.textContent));
  ok(rows.length === 2 && pick.every(([s], k) => rows[k].startsWith(k ? "B" : "A") && rows[k].includes(label(s)) &&
    rows[k].includes("sold out")), "the comparison's result names both strategies, side by side", JSON.stringify(rows));
  const shots = await screenshots(page, "-pair");
  console.log("# screenshots: " + shots.join(" "));
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "inv-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: opt.chromium,
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--user-data-dir=" + profile,
    ],
    timeout: 30000,
  });
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warn" || m.type() === "warning")
        errors.push(`console.${m.type()}: ${m.text()}`);
    });
    page.on("pageerror", (e) => errors.push("page error: " + e.message));
    page.on("requestfailed", (r) => {
      /* The event stream is cut when the page goes: not a failure of the page. */
      if (!r.url().includes("/admin/events?")) errors.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`);
    });
    page.on("response", (r) => {
      if (r.status() >= 400) errors.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`);
    });
    await page.setViewport(LAPTOP);
    await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
    await page.goto(opt.url + "/", { waitUntil: "domcontentloaded" });
    await page.waitForSelector("body[data-ready]");

    if (opt.token) {
      await page.waitForSelector("#auth:not([hidden])", { timeout: 5000 });
      ok(true, "the page asks for the admin token");
      await page.type("#token", opt.token);
      await page.click("#auth-form button[type=submit]");
      await page.waitForSelector("#auth", { hidden: true, timeout: 5000 });
      ok(true, "the token is accepted");
    }
    await page.waitForFunction(() => document.querySelector("#conn").dataset.state === "live",
      { timeout: 5000 });
    ok(true, "the event stream is live");

    /* The comparison. */
    await page.click("#cmp-run");
    await page.waitForFunction((a, b) => {
      const ca = document.querySelector(`.card[data-sku="${a}"]`);
      const cb = document.querySelector(`.card[data-sku="${b}"]`);
      return ca && cb && ca.dataset.sim && cb.dataset.sim && Number(ca.dataset.initial) > 0;
    }, { timeout: 10000 }, SKU1, SKU20);
    ok(true, "the comparison started: both SKUs have cards and simulations");

    const seen1 = new Set();
    let lockSeen = false;
    let soldOut1 = 0;
    let soldOut20 = 0;
    let matches = 0;
    let shots = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 120000) {
      const p = await readPage(page);
      const a = p.skus[SKU1];
      const b = p.skus[SKU20];
      if (a) {
        seen1.add(a.remaining);
        if (a.locked.some((x) => x)) lockSeen = true;
        if (a.remaining === 0 && !soldOut1) soldOut1 = Date.now();
      }
      if (b && b.remaining === 0 && !soldOut20) soldOut20 = Date.now();
      if (a && a.remaining > 0 && a.remaining < CMP_STOCK && matches < 3) {
        await matchWithinOneUpdate(page, SKU1, `during the sale (${matches + 1})`);
        await matchWithinOneUpdate(page, SKU20, `during the sale (${matches + 1})`);
        matches++;
      }
      if (a && shots.length === 0 && a.remaining <= CMP_STOCK * 0.6 && a.remaining >= CMP_STOCK * 0.2) {
        shots = await screenshots(page, "");
        console.log("# screenshots: " + shots.join(" "));
      }
      if (soldOut1 && soldOut20 && a.sim === "finished" && b.sim === "finished") break;
      await sleep(100);
    }
    ok(soldOut1 && soldOut20, "both SKUs sold out on the page",
      `${SKU1} at ${soldOut1 ? soldOut1 - t0 : "never"} ms, ${SKU20} at ${soldOut20 ? soldOut20 - t0 : "never"} ms`);
    ok(soldOut20 && soldOut1 && soldOut20 < soldOut1, `${SKU20} sold out before ${SKU1}`,
      `${soldOut20 - t0} ms vs ${soldOut1 - t0} ms`);
    ok(matches >= 1, "the within-one-update check ran during the sale", `ran ${matches} times`);
    ok(seen1.size >= 8, `${SKU1} drained over time`, `${seen1.size} distinct values seen: ` +
      [...seen1].sort((x, y) => y - x).join(","));
    ok(lockSeen, `${SKU1}'s segment lock was seen held`);
    ok(shots.length === 4, "screenshots taken mid-sale");

    for (const name of [SKU1, SKU20]) {
      const g = await getSku(name);
      audit(g, "sold out");
      ok(g.remaining === 0 && g.sold === CMP_STOCK, `${name} sold exactly its ${CMP_STOCK} units`,
        `remaining ${g.remaining}, sold ${g.sold}`);
      await matchExactly(page, name, "sold out");
    }

    /* An admin action from the page: restock the 1-segment SKU. */
    const before = await getSku(SKU1);
    const card = `.card[data-sku="${SKU1}"]`;
    await page.$eval(`${card} .a-restock input[name=qty]`, (el) => { el.value = "50"; });
    const u0 = (await readPage(page)).updates;
    await page.click(`${card} .a-restock button`);
    await page.waitForFunction((sel, want) => {
      const c = document.querySelector(sel);
      return c && Number(c.dataset.remaining) === want;
    }, { timeout: 5000 }, card, 50);
    const u1 = (await readPage(page)).updates;
    ok(u1 - u0 <= 2, "the restock shows on the page within one update", `${u1 - u0} updates`);
    const after = await getSku(SKU1);
    ok(after.initial === before.initial + 50 && after.remaining === 50,
      "restock from the page: GET agrees", `initial ${before.initial} -> ${after.initial}, remaining ${after.remaining}`);
    audit(after, "after the restock");
    await matchExactly(page, SKU1, "after the restock");

    await pitTwoStrategies(page);

    const end = await screenshots(page, "-end");
    console.log("# screenshots: " + end.join(" "));
    if (opt.docs && shots.length) {
      fs.copyFileSync(shots[0], opt.docs);
      console.log("# copied " + shots[0] + " to " + opt.docs);
    }
    await page.close();
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  ok(errors.length === 0, "no console errors, failed requests or error responses", errors.join(" | "));
}

main().then(
  () => {
    console.log(failures === 0 ? "# all checks passed" : `# ${failures} check(s) failed`);
    process.exit(failures === 0 ? 0 : 1);
  },
  (e) => {
    console.log("not ok - the test ran to the end: " + (e && e.stack ? e.stack : e));
    process.exit(1);
  },
);
