// shardcat serve's dataset browser: plain JavaScript, no framework, no build step.
//
// Three views, each a URL that can be shared (every parameter is in the query string):
//   ui/                                         the catalogs' datasets
//   ui/dataset?d=NAME[&c=CAT][&v=VER][&prefix=P][&sql=Q][&after=K]   a grid of samples
//   ui/sample?d=NAME&k=KEY[&c=CAT][&v=VER]      one sample: every entry, its history
// Data comes from the JSON API under the same root (api/v1). Text from the
// catalog is only ever set as textContent, never parsed as HTML.
"use strict";

const PAGE = 24; // samples per grid page
const NPY_PLOT_MAX = 256 * 1024; // arrays up to this size are fetched whole and drawn

// The app's root path. The server writes its --root-path into the page as
// <meta name="shardcat-root" content="/data"> (empty content when it has none): behind a
// reverse proxy that strips the prefix, the page's own URL could not tell it. A page
// without the tag (an older server) takes everything before /ui in its own URL.
function rootPath() {
  const meta = document.querySelector('meta[name="shardcat-root"]');
  if (meta) return (meta.getAttribute("content") || "").replace(/\/+$/, "");
  return location.pathname.replace(/\/ui(\/.*)?$/, "");
}
const ROOT = rootPath();
const API = `${ROOT}/api/v1`;

// --- small helpers ---------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function params() {
  return new URLSearchParams(location.search);
}

// A page URL of this browser (relative: every view lives beside the others under ui/).
function link(view, query) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") q.set(name, value);
  }
  const tail = q.toString();
  return `${view}${tail ? "?" + tail : ""}`;
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

function count(n) {
  return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US");
}

// "1 sample", "2 samples"; "1 entry", "3 entries" (give the plural when it is not word + s).
function plural(n, word, words = `${word}s`) {
  return `${count(n)} ${n === 1 ? word : words}`;
}

// A list from the API, or an empty one when the field is missing: a partial answer shows
// what it has instead of stopping the page with a TypeError.
function list(value) {
  return Array.isArray(value) ? value : [];
}

// The view's content (a null or false part, a box not shown, is left out).
function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  const parts = [];
  items.forEach(([text, href], i) => {
    if (i) parts.push(el("span", { class: "sep", text: "/" }));
    parts.push(href ? el("a", { href, text }) : el("span", { text }));
  });
  nav.replaceChildren(...parts);
}

// An error as a styled box. `error` is an ApiError, an error line's {type, message, hint},
// or an exception of this script (a field missing from an answer): that one is said in
// words, not shown as a bare "TypeError: ...".
function failure(error) {
  const ours = error instanceof Error && !(error instanceof ApiError) && !(error instanceof PageError);
  // fetch() rejects with a TypeError when no answer came at all (server down, network).
  const unanswered = ours && error instanceof TypeError && /fetch|network/i.test(error.message);
  const type = unanswered ? "NoAnswer" : ours ? "PageError" : error.type || "Error";
  const message = unanswered
    ? `The server did not answer (${error.message}): is it still running? Reload to try again.`
    : ours
      ? `This page could not show the server's answer (${error.message}). Reloading may help; if not, the API's JSON is at ${API}.`
      : error.message || String(error);
  return el("div", { class: "error", role: "alert", "data-error": type },
    message, error.hint && !ours ? `\n${error.hint}` : "");
}

// The API's errors are JSON: {"error": type, "message": ..., "hint": ...}.
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.type = (body && body.error) || `HTTP ${status}`;
    this.hint = body && body.hint;
  }
}

// A failure the page itself describes (an answer it cannot use), with its own words.
class PageError extends Error {
  constructor(type, message) {
    super(message);
    this.type = type;
  }
}

async function api(path, options = {}) {
  const response = await fetch(`${API}${path}`, {
    credentials: "same-origin",
    headers: options.body ? { "Content-Type": "application/json" } : {},
    ...options,
  });
  if (!response.ok) {
    const error = new ApiError(response.status, await response.json().catch(() => null));
    if (response.status === 401) askForToken(error);
    throw error;
  }
  return response;
}

async function json(path, options) {
  return (await api(path, options)).json();
}

// An NDJSON answer (the batch endpoint's), one parsed line at a time as it arrives.
async function* ndjson(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffered += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, end).trim();
      buffered = buffered.slice(end + 1);
      if (line) yield JSON.parse(line);
    }
    if (done) break;
  }
  if (buffered.trim()) yield JSON.parse(buffered);
}

// POST .../batch: the samples of `keys` at version `v` (the latest when empty). The keys
// travel in the body, so any key works, "." and ".." too (no URL path can carry those).
function batch(d, c, v, keys) {
  return api(`${datasetPath(d)}/batch${catalogQuery({ catalog: c })}`, {
    method: "POST", body: JSON.stringify({ keys, version: v || undefined }),
  });
}

function datasetPath(d) {
  return `/datasets/${encodeURIComponent(d)}`;
}

function catalogQuery(query) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") q.set(name, value);
  }
  const tail = q.toString();
  return tail ? `?${tail}` : "";
}

// --- who is asking: GET /session, the header's "signed in as", signing in and out ----------

// The caller as the server sees it: {name, catalog, datasets, anonymous, sql}. null when the
// server does not say (one without GET /session answers 404 or 405): the page then shows
// everything and lets the API refuse what it refuses. A 401 (a token refused) is thrown.
async function whoAmI() {
  try {
    return await json("/session");
  } catch (error) {
    if (error.status === 401) throw error;
    return null;
  }
}

// The header's corner: "anonymous", or "signed in as NAME" and a button to sign out.
function showWho(who) {
  let box = document.getElementById("who");
  if (!box) {
    box = el("div", { id: "who" });
    document.querySelector("header").append(box);
  }
  if (who === "refused") { box.replaceChildren(el("span", { class: "muted", text: "not signed in" })); return; }
  if (!who) { box.replaceChildren(); return; }
  if (who.anonymous) { box.replaceChildren(el("span", { class: "muted", text: "anonymous" })); return; }
  const scope = Array.isArray(who.datasets) ? `datasets: ${who.datasets.join(", ")}` : "every dataset";
  box.replaceChildren(
    el("span", { id: "signed-in", title: scope }, "signed in as ", el("strong", { text: who.name || "(a token without a name)" })),
    el("button", { type: "button", id: "signout", text: "Sign out", on: { click: signOut } }));
}

// DELETE /session forgets the cookie (the token itself stays valid); the reload then shows
// what the server shows without it: the sign-in form, or the anonymous view.
async function signOut() {
  await fetch(`${API}/session`, { method: "DELETE", credentials: "same-origin" }).catch(() => {});
  location.reload();
}

// The token becomes an HttpOnly cookie (POST /session), so images and videos load too.
// `reason`: the 401 that led here ("this server needs a token", "token 'x' is expired").
let asking = false;
function askForToken(reason) {
  if (asking) return;
  asking = true;
  showWho("refused");
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "token" });
  const message = el("div", { id: "signin-reason" }, reason ? failure(reason) : null);
  const form = el("form", {
    class: "search", id: "signin",
    on: {
      submit: async (event) => {
        event.preventDefault();
        let response;
        try {
          response = await fetch(`${API}/session`, {
            method: "POST", credentials: "same-origin",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ token: input.value }),
          });
        } catch (error) {
          message.replaceChildren(failure(new PageError("NoAnswer", `the server did not answer (${error.message})`)));
          return;
        }
        if (response.ok) location.reload();
        else message.replaceChildren(failure(new ApiError(response.status, await response.json().catch(() => null))));
      },
    },
  }, el("label", { for: "token", text: "Token: " }), input,
  el("button", { type: "submit", text: "Sign in" }));
  // A refused token (expired, revoked) is the saved one: on a server that lets anonymous
  // callers in, forgetting it is the way back in without a new one.
  const forget = reason && reason.message !== "this server needs a token"
    ? el("p", {}, el("button", { type: "button", id: "forget", text: "Forget the saved token", on: { click: signOut } }))
    : null;
  show(el("h1", { text: "Sign in" }), message, form, forget,
    el("p", { class: "muted", text: "Make one with: shardcat serve token create --dataset NAME --expires 30d" }));
}

// --- versions: a version is its number; a tag is always said as a tag, never like a number --

// How a version the page reads is said: "version 1 (latest is 3)", "version 2, tag first",
// "version 3 (the latest)". `asked`: the URL's v (a number, a tag or empty); `shown`: the
// number read; `latest`: the newest number.
function versionPhrase(asked, shown, latest) {
  if (shown === undefined || shown === null) return asked ? `version ${asked}` : "the latest version";
  const tag = asked && String(asked) !== String(shown) ? `, tag ${asked}` : "";
  if (!asked) return `the latest version (${shown})`;
  if (latest === undefined || latest === null || shown === latest) return `version ${shown}${tag} (the latest)`;
  return `version ${shown}${tag} (latest is ${latest})`;
}

// The number a version asked for (a number or a tag) stands for in the dataset's log.
function versionNumber(asked, versions) {
  if (!asked) return versions.length ? versions[0].number : null;
  const found = versions.find((x) => String(x.number) === String(asked) || list(x.tags).includes(asked));
  return found ? found.number : null;
}

// --- the datasets ----------------------------------------------------------------------

async function datasetsView() {
  crumbs(["datasets"]);
  document.title = "datasets · shardcat";
  const datasets = list((await json("/datasets")).datasets);
  if (!datasets.length) {
    show(el("h1", { text: "Datasets" }), el("p", { class: "muted", text: "No dataset here yet." }));
    return;
  }
  const catalogs = new Set(datasets.map((d) => d.catalog));
  const rows = datasets.map((d) => el("tr", { "data-dataset": d.name },
    catalogs.size > 1 ? el("td", { text: d.catalog }) : null,
    el("td", {}, el("a", { href: link("dataset", { d: d.name, c: catalogs.size > 1 ? d.catalog : "" }), text: d.name })),
    el("td", { class: "num", text: d.version }),
    el("td", { class: "num", text: count(d.record_count) }),
    el("td", { class: "num", text: count(d.shard_count) }),
    el("td", { class: "num", text: bytes(d.size_bytes) }),
    // A tag is a name pointing at a version number: "first → 2", never "v2"-like.
    el("td", { class: "tags", text: Object.entries(d.tags || {}).map(([t, n]) => `${t} → ${n}`).join(", ") })));
  show(el("h1", { text: "Datasets" }),
    el("div", { class: "scroll" }, el("table", { id: "datasets" },
      el("thead", {}, el("tr", {},
        catalogs.size > 1 ? el("th", { text: "catalog" }) : null,
        el("th", { text: "dataset" }), el("th", { class: "num", text: "version" }),
        el("th", { class: "num", text: "samples" }), el("th", { class: "num", text: "shards" }),
        el("th", { class: "num", text: "size" }), el("th", { text: "tags" }))),
      el("tbody", {}, rows))));
}

// --- a dataset: search by prefix, filter by SQL, a grid of samples -----------------------

async function datasetView(session) {
  const p = params();
  const d = p.get("d");
  if (!d) { location.replace("./"); return; }
  const c = p.get("c") || "";
  const v = p.get("v") || "";
  const prefix = p.get("prefix") || "";
  const sql = p.get("sql") || "";
  const after = p.get("after") || "";
  crumbs(["datasets", "./"], [d]);
  document.title = `${d} · shardcat`;

  const [info, log, who] = await Promise.all([
    json(`${datasetPath(d)}${catalogQuery({ catalog: c, version: v })}`),
    json(`${datasetPath(d)}/versions${catalogQuery({ catalog: c })}`),
    session.catch(() => null),
  ]);
  const versionsList = list(log.versions);
  // "version" is the latest number; "stats_version" the one the counts describe (the v asked
  // for, a tag resolved to its number). An older server sends no stats_version.
  const latest = info.version;
  const shown = info.stats_version ?? (v ? versionNumber(v, versionsList) : latest);

  // The version asked for (a number or a tag) selects its number's option, so that pressing
  // Search keeps reading it; none asked for is "latest", which follows new commits.
  const versions = el("select", { name: "v", id: "version", "aria-label": "version" },
    el("option", { value: "", text: `latest (${latest})` }),
    versionsList.map((x) => el("option", {
      value: x.number, selected: v !== "" && x.number === shown,
      text: `${x.number} · ${x.operation}${list(x.tags).length ? " · tags: " + x.tags.join(", ") : ""}`,
    })));
  const search = el("form", { class: "search", id: "search", method: "get", action: "dataset" },
    el("input", { type: "hidden", name: "d", value: d }),
    c ? el("input", { type: "hidden", name: "c", value: c }) : null,
    el("input", { type: "text", name: "prefix", id: "prefix", value: prefix, placeholder: "key prefix", "aria-label": "key prefix" }),
    versions,
    el("button", { type: "submit", text: "Search" }));

  // SQL reads the whole catalog: a server without --sql refuses it, and so does it for a token
  // scoped to datasets. The box shows only where it can work (or where it is unknown).
  const sqlAllowed = !who || (who.sql !== false && (who.datasets === null || who.datasets === undefined));
  const filter = sqlAllowed ? el("form", { class: "search", id: "filter", method: "get", action: "dataset" },
    el("input", { type: "hidden", name: "d", value: d }),
    c ? el("input", { type: "hidden", name: "c", value: c }) : null,
    v ? el("input", { type: "hidden", name: "v", value: v }) : null,
    el("textarea", {
      name: "sql", id: "sql", "aria-label": "SQL filter",
      placeholder: `SELECT key FROM live_records WHERE dataset = '${d.replace(/'/g, "''")}' AND key LIKE 'prefix%'`,
    }, sql),
    el("button", { type: "submit", text: "Filter" }),
    el("p", { class: "muted note", id: "sql-note" },
      "Read-only SQL; the samples of the keys it returns (its ", el("code", { text: "key" }), " column) are shown. ",
      el("code", { text: "live_records" }), " is the latest version; ",
      el("code", { text: `records_at WHERE version = ${shown ?? "N"}` }), ` reads version ${shown ?? "N"}.`))
    : null;

  const summary = el("p", { class: "muted", id: "summary" },
    `${plural(info.record_count, "sample")} in ${plural(info.shard_count, "shard")}, ${bytes(info.size_bytes)}; ${versionPhrase(v, shown, latest)}`);
  const notes = el("div", { id: "notes" }); // what went wrong, above the grid (never instead of it)
  const grid = el("div", { class: "grid", id: "grid" });
  const pager = el("div", { class: "pager", id: "pager" });
  show(el("h1", { text: d }), summary, search, filter, notes, grid, pager);

  let keys = [];
  let next = null;
  try {
    if (sql) {
      const result = await json(`/sql${catalogQuery({ catalog: c })}`, {
        method: "POST", body: JSON.stringify({ query: sql, limit: PAGE }),
      });
      const rows = list(result.rows);
      if (!list(result.columns).includes("key")) {
        throw new PageError("NoKeyColumn", `the query returned no 'key' column: select key (it returned ${list(result.columns).join(", ") || "no column"})`);
      }
      keys = rows.map((row) => row.key).filter((k) => typeof k === "string");
      pager.append(el("span", { class: "muted", id: "rows",
        text: result.truncated ? `the first ${count(rows.length)} of the rows` : plural(rows.length, "row") }));
    } else {
      const page = await json(`${datasetPath(d)}/keys${catalogQuery({ catalog: c, prefix, after, limit: PAGE, version: v })}`);
      keys = list(page.keys);
      next = page.next;
    }
  } catch (error) {
    if (error.status === 401) throw error;
    notes.append(failure(error));
    return;
  }
  if (!keys.length) grid.append(el("p", { class: "muted", id: "empty", text: "No sample matches." }));
  if (after) pager.append(el("a", { href: link("dataset", { d, c, v, prefix }), text: "« first" }));
  if (next) pager.append(el("a", { id: "next", href: link("dataset", { d, c, v, prefix, after: next }), text: "next »" }));
  await fillGrid(grid, notes, d, c, v, keys);
}

// One batch request for the page's samples, streamed back (NDJSON) in order. A key's error
// is its card's; a failed request is said above the grid, whose cards keep their keys.
async function fillGrid(grid, notes, d, c, v, keys) {
  if (!keys.length) return;
  const cards = new Map(keys.map((k, i) => {
    const card = el("div", { class: "card", "data-key": k },
      el("a", { class: "key", href: link("sample", { d, c, v, k }), text: k }));
    grid.append(card);
    return [i, card];
  }));
  try {
    for await (const line of ndjson(await batch(d, c, v, keys))) {
      const card = line && cards.get(line.index);
      if (!card) continue;
      cards.delete(line.index);
      try {
        placeLine(card, line);
      } catch (error) {
        card.append(failure(error));
      }
    }
  } catch (error) {
    if (error.status === 401) throw error;
    notes.append(failure(error));
  }
  // Keys the answer never reached (it stopped early) say so instead of staying blank.
  for (const card of cards.values()) {
    card.dataset.status = "missing";
    card.append(el("p", { class: "muted", text: "no answer for this key" }));
  }
}

function placeLine(card, line) {
  card.dataset.status = line.status;
  if (line.status === "not_found") {
    card.append(el("p", { class: "muted", text: "not found at this version" }));
    return;
  }
  if (line.status === "error") {
    card.append(failure(lineError(line)));
    return;
  }
  if (line.status !== "found") throw new PageError("PageError", `an answer this page does not know: status ${line.status}`);
  // What a person looks at first: pictures and media, then arrays, then text and JSON.
  const rank = (e) => (/^(image|video|audio)\//.test(e.content_type) ? 0 : e.content_type === "application/x-npy" ? 1 : 2);
  const entries = sampleEntries(line).slice().sort((a, b) => rank(a) - rank(b));
  for (const entry of entries) card.append(renderEntry(entry, false));
}

// A batch line's error: {"error": TYPE, "message": TEXT, "hint": TEXT|null}.
function lineError(line) {
  const e = line.error || {};
  return { type: e.error || "Error", message: e.message || "the server could not read this sample", hint: e.hint };
}

// A found line's entries, each with the fields the page uses (a missing one said, not thrown).
function sampleEntries(line) {
  if (!line.sample || !Array.isArray(line.sample.entries)) {
    throw new PageError("PageError", "the server's answer for this sample lists no entries");
  }
  return line.sample.entries.map((e) => ({
    ...e, name: String(e.name ?? "?"), content_type: String(e.content_type || "application/octet-stream"),
  }));
}

// --- entries, by content type ----------------------------------------------------------

// An image, audio or video that does not load (a damaged file, a URL the browser cannot
// reach) is replaced by a note instead of the browser's broken-image icon. The listener is
// added in code: the page's Content-Security-Policy forbids inline onerror= handlers.
function media(tag, attrs, what) {
  const node = el(tag, attrs);
  node.addEventListener("error", () => {
    node.replaceWith(el("p", { class: "error small", "data-failed": what, text: `could not load this ${what}` }));
  });
  return node;
}

function renderEntry(entry, full) {
  const box = el("div", { class: "entry", "data-entry": entry.name, "data-type": entry.content_type });
  box.append(el("div", { class: "label" },
    `${entry.name} · ${entry.content_type} · ${bytes(entry.size)}`,
    full && entry.crc32c !== undefined ? ` · crc32c ${entry.crc32c}` : "",
    full && entry.href ? el("span", {}, " · ", el("a", { href: entry.href, text: "bytes" })) : ""));
  const type = entry.content_type;
  if (!entry.href && !("inline" in entry)) {
    box.append(el("p", { class: "muted", text: "(no link to its bytes in the answer)" }));
  } else if (type.startsWith("image/")) {
    box.append(media("img", { src: entry.href, alt: entry.name, loading: "lazy", decoding: "async" }, "image"));
  } else if (type.startsWith("audio/")) {
    box.append(media("audio", { src: entry.href, controls: true, preload: "metadata" }, "audio"));
  } else if (type.startsWith("video/")) {
    box.append(media("video", { src: entry.href, controls: true, preload: "metadata", muted: true }, "video"));
  } else if (type.startsWith("application/json")) {
    box.append(el("pre", { text: "inline" in entry ? JSON.stringify(entry.inline, null, 2) : `(${bytes(entry.size)}: open its bytes)` }));
  } else if (type.startsWith("text/")) {
    box.append(el("pre", { text: "inline" in entry ? String(entry.inline) : `(${bytes(entry.size)}: open its bytes)` }));
  } else if (type === "application/x-npy") {
    const note = el("div", { class: "array", text: "array…" });
    box.append(note);
    summariseArray(entry, note, full).catch((error) => note.replaceChildren(failure(error)));
  } else if (!full) {
    box.append(el("a", { href: entry.href, text: "bytes" }));
  }
  return box;
}

// A .npy entry: its header (read with a Range request) says dtype and shape; a small
// numeric array is then read whole and drawn: a line for 1-D, grey levels for 2-D.
async function summariseArray(entry, note, full) {
  const first = await fetch(entry.href, { credentials: "same-origin", headers: { Range: "bytes=0-1023" } });
  if (!first.ok) throw new ApiError(first.status, await first.json().catch(() => null));
  const header = parseNpyHeader(new Uint8Array(await first.arrayBuffer()));
  const n = header.shape.reduce((a, b) => a * b, 1);
  note.replaceChildren(el("span", { class: "shape", text: `${header.descr} · shape (${header.shape.join(", ")}${header.shape.length === 1 ? "," : ""})` }));
  const kind = TYPED[header.descr.replace(/^[<|=]/, "")];
  if (!kind || header.fortran || header.descr.startsWith(">") || entry.size > NPY_PLOT_MAX || n === 0) return;
  const whole = await fetch(entry.href, { credentials: "same-origin" });
  if (!whole.ok) throw new ApiError(whole.status, await whole.json().catch(() => null));
  const data = await whole.arrayBuffer();
  const values = new kind(data.slice(header.dataOffset, header.dataOffset + n * kind.BYTES_PER_ELEMENT));
  const canvas = header.shape.length === 1 ? plotLine(values, full) :
    header.shape.length === 2 ? plotGrey(values, header.shape[0], header.shape[1]) : null;
  if (canvas) note.append(canvas);
}

const TYPED = {
  f4: Float32Array, f8: Float64Array, u1: Uint8Array, i1: Int8Array, u2: Uint16Array,
  i2: Int16Array, u4: Uint32Array, i4: Int32Array, b1: Uint8Array,
};

function parseNpyHeader(head) {
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
  if (head.length < 10 || !magic.every((b, i) => head[i] === b)) throw new PageError("NotAnArray", "not a .npy array");
  const major = head[6];
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  const size = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  if (start + size > head.length) throw new PageError("NotAnArray", "the array's header is longer than 1 KiB");
  const text = new TextDecoder("latin1").decode(head.slice(start, start + size));
  const descr = /'descr':\s*'([^']+)'/.exec(text);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(text);
  if (!descr || !shape) throw new PageError("NotAnArray", "unreadable .npy header");
  return {
    descr: descr[1],
    fortran: /'fortran_order':\s*True/.test(text),
    shape: shape[1].split(",").map((s) => s.trim()).filter(Boolean).map(Number),
    dataOffset: start + size,
  };
}

function plotLine(values, full) {
  const width = full ? 600 : 200;
  const height = full ? 160 : 60;
  const canvas = el("canvas", { width, height, class: "plot" });
  const g = canvas.getContext("2d");
  let lo = Infinity; let hi = -Infinity;
  for (const x of values) { if (Number.isFinite(x)) { lo = Math.min(lo, x); hi = Math.max(hi, x); } }
  if (!Number.isFinite(lo)) return canvas;
  const span = hi - lo || 1;
  g.strokeStyle = "#2857c5";
  g.beginPath();
  values.forEach((x, i) => {
    const px = values.length === 1 ? width / 2 : (i / (values.length - 1)) * (width - 1);
    const py = height - 1 - ((x - lo) / span) * (height - 1);
    if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
  });
  g.stroke();
  return canvas;
}

function plotGrey(values, rows, cols) {
  const canvas = el("canvas", { width: cols, height: rows, class: "thumb" });
  const g = canvas.getContext("2d");
  const image = g.createImageData(cols, rows);
  let lo = Infinity; let hi = -Infinity;
  for (const x of values) { if (Number.isFinite(x)) { lo = Math.min(lo, x); hi = Math.max(hi, x); } }
  const span = hi - lo || 1;
  values.forEach((x, i) => {
    const level = Number.isFinite(x) ? Math.round(((x - lo) / span) * 255) : 0;
    image.data.set([level, level, level, 255], i * 4);
  });
  g.putImageData(image, 0, 0);
  canvas.style.width = `${Math.min(200, cols * 4)}px`;
  canvas.style.imageRendering = "pixelated";
  return canvas;
}

// --- one sample --------------------------------------------------------------------------

function shellQuote(s) {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

// The sample through the batch endpoint (its key in the body: "." and ".." work), as its
// one NDJSON line.
async function readSample(d, c, v, k) {
  for await (const line of ndjson(await batch(d, c, v, [k]))) {
    if (line && line.index === 0) return line;
  }
  throw new PageError("PageError", "the server's answer for this sample was empty");
}

async function sampleView() {
  const p = params();
  const d = p.get("d");
  const k = p.get("k");
  if (!d || k === null) { location.replace("./"); return; }
  const c = p.get("c") || "";
  const v = p.get("v") || "";
  crumbs(["datasets", "./"], [d, link("dataset", { d, c, v })], [k]);
  document.title = `${k} · ${d} · shardcat`;
  let line;
  let log;
  try {
    [line, log] = await Promise.all([
      readSample(d, c, v, k),
      json(`${datasetPath(d)}/versions${catalogQuery({ catalog: c })}`),
    ]);
  } catch (error) {
    if (error.status === 401) throw error;
    show(el("h1", { text: k }), failure(error));
    return;
  }
  const versions = list(log.versions);
  // The log is newest first: its first number is the latest, said even when none was asked.
  const latest = versions.length ? versions[0].number : null;
  const number = versionNumber(v, versions);
  const where = versionPhrase(v, number, latest);
  if (line.status !== "found") {
    const error = line.status === "error" ? lineError(line)
      : line.status === "not_found" ? new PageError("SampleNotFound", `no sample '${k}' in dataset '${d}' at ${where}`)
        : new PageError("PageError", `an answer this page does not know: status ${line.status}`);
    show(el("h1", { text: k }), failure(error), historyOf(versions, d, c, k, v && number));
    return;
  }
  const entries = sampleEntries(line);
  const command = ["shardcat", "get", shellQuote(d), shellQuote(k)].concat(v ? ["--version", shellQuote(v)] : []).join(" ");
  const code = el("code", { id: "command", text: command });
  const copy = el("button", {
    type: "button", id: "copy", text: "Copy",
    on: { click: async () => { await navigator.clipboard.writeText(command).catch(() => {}); copy.textContent = "Copied"; } },
  });
  show(
    el("h1", { text: k }),
    el("p", { class: "muted", id: "summary", text: `${d}, ${where}; ${plural(entries.length, "entry", "entries")}` }),
    el("div", { class: "cmd" }, code, copy),
    el("div", { class: "sample", id: "entries" }, entries.map((e) => renderEntry(e, true))),
    historyOf(versions, d, c, k, v && number),
  );
}

// The dataset's versions, newest first, each a link to this sample as that version reads it;
// `shown`, the number of the version asked for (a tag resolved), is in bold instead.
function historyOf(versions, d, c, k, shown) {
  return el("section", {},
    el("h2", { text: "Versions" }),
    el("div", { class: "scroll" }, el("table", { id: "history" },
      el("thead", {}, el("tr", {}, el("th", { text: "version" }), el("th", { text: "operation" }),
        el("th", { text: "when" }), el("th", { text: "tags" }), el("th", { text: "message" }))),
      el("tbody", {}, versions.map((x) => el("tr", {},
        el("td", {}, x.number === shown ? el("strong", { text: `v${x.number}` })
          : el("a", { href: link("sample", { d, c, k, v: x.number }), text: `v${x.number}` })),
        el("td", { text: x.operation || "" }),
        el("td", { text: x.created_at || "" }),
        el("td", { class: "tags", text: list(x.tags).join(", ") }),
        el("td", { text: x.message || "" })))))));
}

// --- routing -----------------------------------------------------------------------------

async function route() {
  const view = location.pathname.replace(/^.*\/ui\/?/, "");
  // Who is asking, asked beside the view's own requests (not before them): the header says
  // it when it comes; the dataset view waits for it to decide on its SQL box.
  const session = whoAmI();
  session.then(showWho, (error) => showWho(error.status === 401 ? "refused" : null));
  try {
    if (view === "dataset") await datasetView(session);
    else if (view === "sample") await sampleView();
    else await datasetsView();
  } catch (error) {
    if (error.status !== 401) show(failure(error));
  }
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", route);
