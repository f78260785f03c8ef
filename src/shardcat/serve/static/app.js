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

const ROOT = location.pathname.replace(/\/ui(\/.*)?$/, ""); // the app's root path
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

function plural(n, word) {
  return `${count(n)} ${word}${n === 1 ? "" : "s"}`;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat());
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

function failure(error) {
  return el("div", { class: "error", role: "alert", "data-error": error.type || "Error" },
    error.message || String(error), error.hint ? `\n${error.hint}` : "");
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

async function api(path, options = {}) {
  const response = await fetch(`${API}${path}`, {
    credentials: "same-origin",
    headers: options.body ? { "Content-Type": "application/json" } : {},
    ...options,
  });
  if (response.status === 401) {
    askForToken();
    throw new ApiError(401, await response.json().catch(() => null));
  }
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  return response;
}

async function json(path, options) {
  return (await api(path, options)).json();
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

// --- signing in: the token becomes an HttpOnly cookie, so images and videos load too ------

let asking = false;
function askForToken() {
  if (asking) return;
  asking = true;
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "token" });
  const message = el("p", { class: "muted" });
  const form = el("form", {
    class: "search", id: "signin",
    on: {
      submit: async (event) => {
        event.preventDefault();
        const response = await fetch(`${API}/session`, {
          method: "POST", credentials: "same-origin",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ token: input.value }),
        });
        if (response.ok) location.reload();
        else {
          const body = await response.json().catch(() => ({}));
          message.textContent = body.message || `HTTP ${response.status}`;
        }
      },
    },
  }, el("label", { for: "token", text: "This server needs a token: " }), input,
  el("button", { type: "submit", text: "Sign in" }));
  show(el("h1", { text: "Sign in" }), form, message,
    el("p", { class: "muted", text: "Make one with: shardcat serve token create --dataset NAME --expires 30d" }));
}

// --- the datasets ----------------------------------------------------------------------

async function datasetsView() {
  crumbs(["datasets"]);
  document.title = "datasets · shardcat";
  const { datasets } = await json("/datasets");
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
    el("td", { text: Object.entries(d.tags || {}).map(([t, v]) => `${t}=v${v}`).join(", ") })));
  show(el("h1", { text: "Datasets" }),
    el("table", { id: "datasets" },
      el("thead", {}, el("tr", {},
        catalogs.size > 1 ? el("th", { text: "catalog" }) : null,
        el("th", { text: "dataset" }), el("th", { class: "num", text: "version" }),
        el("th", { class: "num", text: "samples" }), el("th", { class: "num", text: "shards" }),
        el("th", { class: "num", text: "size" }), el("th", { text: "tags" }))),
      el("tbody", {}, rows)));
}

// --- a dataset: search by prefix, filter by SQL, a grid of samples -----------------------

async function datasetView() {
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

  const [info, log] = await Promise.all([
    json(`${datasetPath(d)}${catalogQuery({ catalog: c, version: v })}`),
    json(`${datasetPath(d)}/versions${catalogQuery({ catalog: c })}`),
  ]);
  const versions = el("select", { name: "v", id: "version" },
    el("option", { value: "", text: `latest (v${info.version})` }),
    log.versions.map((x) => el("option", {
      value: x.number, selected: String(x.number) === v,
      text: `v${x.number} · ${x.operation}${x.tags.length ? " · " + x.tags.join(", ") : ""}`,
    })));
  const search = el("form", { class: "search", id: "search", method: "get", action: "dataset" },
    el("input", { type: "hidden", name: "d", value: d }),
    c ? el("input", { type: "hidden", name: "c", value: c }) : null,
    el("input", { type: "text", name: "prefix", id: "prefix", value: prefix, placeholder: "key prefix" }),
    versions,
    el("button", { type: "submit", text: "Search" }));
  const filter = el("form", { class: "search", id: "filter", method: "get", action: "dataset" },
    el("input", { type: "hidden", name: "d", value: d }),
    c ? el("input", { type: "hidden", name: "c", value: c }) : null,
    v ? el("input", { type: "hidden", name: "v", value: v }) : null,
    el("textarea", {
      name: "sql", id: "sql",
      placeholder: `SELECT key FROM live_records WHERE dataset = '${d}' AND key LIKE 'cam3/%'  (read-only SQL: the keys it returns are shown)`,
    }, sql),
    el("button", { type: "submit", text: "Filter" }));

  const summary = el("p", { class: "muted" },
    `${plural(info.record_count, "sample")} in ${plural(info.shard_count, "shard")}, ${bytes(info.size_bytes)}; version ${info.version}`);
  const grid = el("div", { class: "grid", id: "grid" });
  const pager = el("div", { class: "pager" });
  show(el("h1", { text: d }), summary, search, filter, grid, pager);

  let keys;
  let next = null;
  try {
    if (sql) {
      const result = await json(`/sql${catalogQuery({ catalog: c })}`, {
        method: "POST", body: JSON.stringify({ query: sql, limit: PAGE }),
      });
      const column = result.columns.includes("key") ? "key" : result.columns[0];
      keys = result.rows.map((row) => row[column]).filter((k) => typeof k === "string");
      pager.append(el("span", { class: "muted", text: `${result.rows.length} rows${result.truncated ? " (first ones)" : ""}` }));
    } else {
      const page = await json(`${datasetPath(d)}/keys${catalogQuery({ catalog: c, prefix, after, limit: PAGE, version: v })}`);
      keys = page.keys;
      next = page.next;
    }
  } catch (error) {
    grid.replaceWith(failure(error));
    return;
  }
  if (!keys.length) grid.append(el("p", { class: "muted", id: "empty", text: "No sample matches." }));
  if (after) pager.append(el("a", { href: link("dataset", { d, c, v, prefix }), text: "« first" }));
  if (next) pager.append(el("a", { id: "next", href: link("dataset", { d, c, v, prefix, after: next }), text: "next »" }));
  await fillGrid(grid, d, c, v, keys);
}

// One batch request for the page's samples, streamed back (NDJSON) in order.
async function fillGrid(grid, d, c, v, keys) {
  if (!keys.length) return;
  const cards = new Map(keys.map((k, i) => {
    const card = el("div", { class: "card", "data-key": k },
      el("a", { class: "key", href: link("sample", { d, c, v, k }), text: k }));
    grid.append(card);
    return [i, card];
  }));
  const response = await api(`${datasetPath(d)}/batch${catalogQuery({ catalog: c })}`, {
    method: "POST", body: JSON.stringify({ keys, version: v || undefined }),
  });
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
      if (line) placeLine(cards, JSON.parse(line));
    }
    if (done) break;
  }
  if (buffered.trim()) placeLine(cards, JSON.parse(buffered));
}

function placeLine(cards, line) {
  const card = cards.get(line.index);
  if (!card) return;
  if (line.status !== "found") {
    card.append(el("p", { class: "muted", text: line.status.replace("_", " ") }));
    return;
  }
  // What a person looks at first: pictures and media, then arrays, then text and JSON.
  const rank = (e) => (/^(image|video|audio)\//.test(e.content_type) ? 0 : e.content_type === "application/x-npy" ? 1 : 2);
  const entries = line.sample.entries.slice().sort((a, b) => rank(a) - rank(b));
  for (const entry of entries) card.append(renderEntry(entry, false));
}

// --- entries, by content type ----------------------------------------------------------

function renderEntry(entry, full) {
  const box = el("div", { class: "entry", "data-entry": entry.name, "data-type": entry.content_type });
  box.append(el("div", { class: "label" },
    `${entry.name} · ${entry.content_type} · ${bytes(entry.size)}`,
    full ? ` · crc32c ${entry.crc32c}` : "",
    full ? el("span", {}, " · ", el("a", { href: entry.href, text: "bytes" })) : ""));
  const type = entry.content_type;
  if (type.startsWith("image/")) {
    box.append(el("img", { src: entry.href, alt: entry.name, loading: "lazy", decoding: "async" }));
  } else if (type.startsWith("audio/")) {
    box.append(el("audio", { src: entry.href, controls: true, preload: "metadata" }));
  } else if (type.startsWith("video/")) {
    box.append(el("video", { src: entry.href, controls: true, preload: "metadata", muted: true }));
  } else if (type.startsWith("application/json")) {
    box.append(el("pre", { text: "inline" in entry ? JSON.stringify(entry.inline, null, 2) : `(${bytes(entry.size)}: open its bytes)` }));
  } else if (type.startsWith("text/")) {
    box.append(el("pre", { text: "inline" in entry ? entry.inline : `(${bytes(entry.size)}: open its bytes)` }));
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
  const head = new Uint8Array(await (await fetch(entry.href, {
    credentials: "same-origin", headers: { Range: "bytes=0-1023" },
  })).arrayBuffer());
  const header = parseNpyHeader(head);
  const n = header.shape.reduce((a, b) => a * b, 1);
  note.replaceChildren(el("span", { class: "shape", text: `${header.descr} · shape (${header.shape.join(", ")}${header.shape.length === 1 ? "," : ""})` }));
  const kind = TYPED[header.descr.replace(/^[<|=]/, "")];
  if (!kind || header.fortran || header.descr.startsWith(">") || entry.size > NPY_PLOT_MAX || n === 0) return;
  const data = await (await fetch(entry.href, { credentials: "same-origin" })).arrayBuffer();
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
  if (head.length < 10 || !magic.every((b, i) => head[i] === b)) throw new Error("not a .npy array");
  const major = head[6];
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  const size = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  if (start + size > head.length) throw new Error("the array's header is longer than 1 KiB");
  const text = new TextDecoder("latin1").decode(head.slice(start, start + size));
  const descr = /'descr':\s*'([^']+)'/.exec(text);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(text);
  if (!descr || !shape) throw new Error("unreadable .npy header");
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

async function sampleView() {
  const p = params();
  const d = p.get("d");
  const k = p.get("k");
  if (!d || k === null) { location.replace("./"); return; }
  const c = p.get("c") || "";
  const v = p.get("v") || "";
  crumbs(["datasets", "./"], [d, link("dataset", { d, c, v })], [k]);
  document.title = `${k} · ${d} · shardcat`;
  let sample;
  let log;
  try {
    [sample, log] = await Promise.all([
      json(`${datasetPath(d)}/samples/${encodeURIComponent(k)}${catalogQuery({ catalog: c, version: v })}`),
      json(`${datasetPath(d)}/versions${catalogQuery({ catalog: c })}`),
    ]);
  } catch (error) {
    show(el("h1", { text: k }), failure(error));
    return;
  }
  const command = ["shardcat", "get", shellQuote(d), shellQuote(k)].concat(v ? ["--version", shellQuote(v)] : []).join(" ");
  const code = el("code", { id: "command", text: command });
  const copy = el("button", {
    type: "button", id: "copy", text: "Copy",
    on: { click: async () => { await navigator.clipboard.writeText(command).catch(() => {}); copy.textContent = "Copied"; } },
  });
  const history = el("table", { id: "history" },
    el("thead", {}, el("tr", {}, el("th", { text: "version" }), el("th", { text: "operation" }),
      el("th", { text: "when" }), el("th", { text: "tags" }), el("th", { text: "message" }))),
    el("tbody", {}, log.versions.map((x) => el("tr", {},
      el("td", {}, String(x.number) === v ? el("strong", { text: `v${x.number}` })
        : el("a", { href: link("sample", { d, c, k, v: x.number }), text: `v${x.number}` })),
      el("td", { text: x.operation }),
      el("td", { text: x.created_at || "" }),
      el("td", { text: x.tags.join(", ") }),
      el("td", { text: x.message || "" })))));
  show(
    el("h1", { text: k }),
    el("p", { class: "muted", text: `${d}, ${v ? "version " + v : "the latest version"}; ${sample.entries.length} entries` }),
    el("div", { class: "cmd" }, code, copy),
    el("div", { class: "sample", id: "entries" }, sample.entries.map((e) => renderEntry(e, true))),
    el("h2", { text: "Versions" }),
    history,
  );
}

// --- routing -----------------------------------------------------------------------------

async function route() {
  const view = location.pathname.replace(/^.*\/ui\/?/, "");
  try {
    if (view === "dataset") await datasetView();
    else if (view === "sample") await sampleView();
    else await datasetsView();
    document.body.dataset.ready = "true";
  } catch (error) {
    if (error.status !== 401) show(failure(error));
    document.body.dataset.ready = "true";
  }
}

document.addEventListener("DOMContentLoaded", route);
