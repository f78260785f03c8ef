"""docs/BENCHMARKS.md and its plots (docs/benchmarks/*.png), from one run's results."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from benchmarks.peers.runner import Result

HAND_RUN = (
    "<!-- Hand-run sections: everything below this line is kept as it is when"
    " benchmarks/peers rewrites this file. -->"
)
"""Below this marker docs/BENCHMARKS.md holds sections measured by hand with other scripts
(each naming its command, date and machine load); :func:`write_report` keeps them."""


def hand_run_sections(path: str) -> str:
    """The marker and what follows it in the report at ``path`` ("" if none)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    at = text.find(HAND_RUN)
    return "" if at < 0 else text[at:]


# (label, value getter, format, higher is better)
MEASURES: list[tuple[str, Callable[[Result], float | None], str, bool]] = [
    ("write MB/s (catalog/index included)", lambda r: r.write_mbps, "{:,.0f}", True),
    ("registration keys/s", lambda r: r.registration_kps, "{:,.0f}", True),
    ("registration keys per CPU-second", lambda r: r.registration_cpu_kps, "{:,.0f}", True),
    ("point lookup p50 ms", lambda r: _pct(r.point_ms, 50), "{:.3f}", False),
    ("point lookup p99 ms", lambda r: _pct(r.point_ms, 99), "{:.3f}", False),
    ("point lookup bytes fetched (median)", lambda r: r.point_bytes, "{:,.0f}", False),
    ("one ranged GET of the record p50 ms", lambda r: _pct(r.ranged_get_ms, 50), "{:.3f}", False),
    ("batch keys/s", lambda r: r.batch_kps, "{:,.0f}", True),
    ("batch keys per CPU-second", lambda r: r.batch_cpu_kps, "{:,.0f}", True),
    ("batch bytes fetched per key", lambda r: r.batch_bytes_per_key, "{:,.0f}", False),
    ("batch requests (median)", lambda r: r.batch_requests, "{:,.0f}", False),
    ("batch minor page faults (median)", lambda r: r.batch_faults, "{:,.0f}", False),
    ("cold first lookup ms (fresh process)", lambda r: r.cold_ms, "{:,.0f}", False),
    ("streaming MB/s", lambda r: r.stream_mbps, "{:,.0f}", True),
    ("streaming connections in flight (peak)", lambda r: r.stream_connections, "{:,.0f}", True),
    ("streaming connections in flight (mean)", lambda r: r.stream_mean_connections, "{:.1f}", True),
    ("streaming line rate MB/s (peak × bandwidth)", lambda r: r.stream_line_mbps, "{:,.0f}", True),
    ("point p50 ms, small catalog", lambda r: r.catalog_small_ms, "{:.3f}", False),
    ("point p50 ms, large catalog", lambda r: r.catalog_large_ms, "{:.3f}", False),
    (
        "large / small catalog p50 (target <= 1.5)",
        lambda r: (
            r.catalog_large_ms / r.catalog_small_ms
            if r.catalog_large_ms and r.catalog_small_ms
            else None
        ),
        "{:.2f}",
        False,
    ),
]


# Counts that describe how a system reads rather than how well: shown without a ratio.
NO_RATIO = {
    "batch requests (median)",
    "batch minor page faults (median)",
    "streaming connections in flight (peak)",
    "streaming connections in flight (mean)",
    "streaming line rate MB/s (peak × bandwidth)",
}


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def backend_label(backend: str) -> str:
    """A backend as the report names it: ``s3 same-region (20 ms, 90 MB/s per connection)``."""
    kind, _, name = backend.partition(" ")
    if not name:
        return backend
    from benchmarks.latency_proxy import profile

    return f"{kind} {profile(name).describe()}"


def _backends(results: list[Result]) -> list[str]:
    return list(dict.fromkeys(r.backend for r in results))


def run_notes(results: list[Result], info: dict[str, Any] | None = None) -> list[str]:
    """What each system said about this run (how it was helped, the floor's other figures), and
    the stand-in's own limits measured after each S3 backend (``benchmarks/peers/standin.py``)."""
    from benchmarks.peers.standin import Limits

    lines = [
        f"- {r.backend}/{r.system}: {note}"
        for r in results
        if not r.skipped
        for note in dict.fromkeys(r.notes)
    ]
    for backend, saved in ((info or {}).get("standin") or {}).items():
        lines.append(f"- {backend}/stand-in (measured): {Limits(**saved).describe()}")
    return ["## Notes from this run", "", *lines, ""] if lines else []


def machine() -> str:
    """This machine in one line (stored with a run's results, so a regenerated report keeps it)."""
    return (
        f"{_cpu()}, {os.cpu_count()} cores, {platform.system()} {platform.release()},"
        f" Python {platform.python_version()}"
    )


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _load_words(info: dict[str, Any]) -> str:
    """How busy the machine was before the run (the run itself adds about one to the load)."""
    cores = os.cpu_count() or 1
    if info["load_start"][0] <= cores / 2:
        return "**Idle**"
    return "**Shared and loaded**, so absolute numbers are noisy"


def table(results: list[Result]) -> list[str]:
    systems: list[str] = []
    for r in results:
        if r.system not in systems:
            systems.append(r.system)
    by = {(r.backend, r.system): r for r in results}
    backends = _backends(results)
    lines = [
        "| measure | " + " | ".join(systems) + " |",
        "| --- | " + " | ".join("---" for _ in systems) + " |",
    ]
    for backend in backends:
        for label, get, fmt, _ in MEASURES:
            floor = by.get((backend, "floor"))
            base = get(floor) if floor and not floor.skipped else None
            cells = []
            for name in systems:
                r = by.get((backend, name))
                if r is None:
                    cells.append("")
                    continue
                if r.skipped:
                    cells.append("skipped")
                    continue
                v = get(r)
                if v is None:
                    cells.append("mmap" if "bytes" in label and r.mmap_reads else "n/a")
                elif name == "floor" or not base or label in NO_RATIO:
                    cells.append(fmt.format(v))
                else:
                    cells.append(f"{fmt.format(v)} ({v / base:.2f}×)")
            if all(c in ("", "n/a", "skipped", "mmap") for c in cells):
                continue  # not measured on this backend by anyone (e.g. the large catalog on S3)
            lines.append(f"| {backend_label(backend)}: {label} | " + " | ".join(cells) + " |")
    return lines


def targets(results: list[Result]) -> list[str]:
    """shardcat against issue 10's targets, each as measured in this run: met, or missed by how much."""
    by = {(r.backend, r.system): r for r in results if not r.skipped}
    # what, backend, value, bound, higher is better, and for a target set
    # against peers, the floor's own ratio to them: what the same work with
    # no format reaches here, the measure of what the machine allows.
    rows: list[tuple[str, str, float, float, bool, float | None]] = []

    def peers(backend: str) -> list[Result]:
        return [r for (b, n), r in by.items() if b == backend and n not in ("floor", "shardcat")]

    for backend in _backends(results):
        ours, floor = by.get((backend, "shardcat")), by.get((backend, "floor"))
        if ours is None or floor is None:
            continue
        p50, f50 = _pct(ours.point_ms, 50), _pct(floor.point_ms, 50)
        if p50 and f50:
            rows.append(("point p50 ≤ 1.2 × floor", backend, p50 / f50, 1.2, False, None))
        if ours.batch_kps and floor.batch_kps and backend == "local":
            rows.append(
                (
                    "batch keys/s ≥ 0.8 × floor",
                    backend,
                    ours.batch_kps / floor.batch_kps,
                    0.8,
                    True,
                    None,
                )
            )
        lance = by.get((backend, "lance"))
        if ours.batch_kps and lance and lance.batch_kps:
            rows.append(
                (
                    "batch keys/s ≥ 2.5 × Lance",
                    backend,
                    ours.batch_kps / lance.batch_kps,
                    2.5,
                    True,
                    (floor.batch_kps or 0.0) / lance.batch_kps,
                )
            )
        fastest = max((r.write_mbps or 0.0 for r in peers(backend)), default=0.0)
        if ours.write_mbps and fastest:
            rows.append(
                (
                    "write MB/s ≥ the fastest peer",
                    backend,
                    ours.write_mbps / fastest,
                    1.0,
                    True,
                    (floor.write_mbps or 0.0) / fastest,
                )
            )
        if ours.stream_mbps and floor.stream_mbps:
            rows.append(
                (
                    "streaming ≥ 0.5 × raw read",
                    backend,
                    ours.stream_mbps / floor.stream_mbps,
                    0.5,
                    True,
                    None,
                )
            )
        best = max((r.stream_mbps or 0.0 for r in peers(backend)), default=0.0)
        if ours.stream_mbps and best:
            rows.append(
                (
                    "streaming > every peer",
                    backend,
                    ours.stream_mbps / best,
                    1.0,
                    True,
                    (floor.stream_mbps or 0.0) / best,
                )
            )
        if ours.registration_kps and floor.registration_kps:
            rows.append(
                (
                    "registration ≥ 0.8 × bare bulk insert",
                    backend,
                    ours.registration_kps / floor.registration_kps,
                    0.8,
                    True,
                    None,
                )
            )
        if backend.startswith("s3") and ours.point_bytes and floor.point_bytes:
            rows.append(
                (
                    "bytes per point lookup ≤ record + 4 KiB",
                    backend,
                    ours.point_bytes - floor.point_bytes,
                    4096,
                    False,
                    None,
                )
            )
        if ours.catalog_large_ms and ours.catalog_small_ms:
            rows.append(
                (
                    "large / small catalog p50 ≤ 1.5",
                    backend,
                    ours.catalog_large_ms / ours.catalog_small_ms,
                    1.5,
                    False,
                    None,
                )
            )
    lines = [
        "| target | backend | measured | the floor's own figure | met? |",
        "| --- | --- | --- | --- | --- |",
    ]
    for what, backend, value, bound, higher, floor_allows in rows:
        shown = f"{value:,.0f} B over the record" if "bytes" in what else f"{value:.2f}"
        if "bytes" in what:
            verdict = "met" if value <= bound else f"missed by {value - bound:,.0f} B"
        else:
            verdict = _verdict(value, bound, higher, floor_allows)
        allows = "" if floor_allows is None else f"{floor_allows:.2f}"
        lines.append(f"| {what} | {backend_label(backend)} | {shown} | {allows} | {verdict} |")
    return lines


def _verdict(value: float, bound: float, higher: bool, floor_allows: float | None) -> str:
    """Met, or missed by how much; and whether the floor, the same work with no format, misses it too."""
    if value >= bound if higher else value <= bound:
        return "met"
    verdict = (
        f"missed: {value / bound:.2f} of the target"
        if higher
        else f"missed: {value / bound:.2f} × the bound"
    )
    if floor_allows is not None and (floor_allows < bound if higher else floor_allows > bound):
        # Not a format's cost: the same work with no format misses it too.
        verdict += f"; the floor misses it too ({floor_allows:.2f})"
    return verdict


def plots(results: list[Result], folder: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    made = []
    ran = [r for r in results if not r.skipped]
    for backend in dict.fromkeys(r.backend for r in ran if r.point_ms):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in ran:
            if r.backend == backend and r.point_ms:
                xs = np.sort(np.asarray(r.point_ms))
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=r.system)
        ax.set_xscale("log")
        ax.set_xlabel("point lookup latency (ms, log scale)")
        ax.set_ylabel("fraction of lookups")
        ax.set_title(f"Point lookup latency, {backend_label(backend)} (CDF)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        slug = backend.replace(" ", "-")
        name = f"latency-{slug}.png"
        fig.tight_layout()
        fig.savefig(os.path.join(folder, name), dpi=90)
        plt.close(fig)
        made.append(name)

        bars = [
            ("write MB/s", lambda r: r.write_mbps),
            ("streaming MB/s", lambda r: r.stream_mbps),
            ("batch keys/s", lambda r: r.batch_kps),
        ]
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.5))
        rows = [r for r in ran if r.backend == backend]
        for ax, (title, get) in zip(axes, bars):
            vals = [get(r) or 0.0 for r in rows]
            ax.bar([r.system for r in rows], vals, color="tab:blue")
            ax.set_title(f"{title}, {backend}", fontsize=10)
            ax.tick_params(axis="x", rotation=35)
        fig.tight_layout()
        name = f"throughput-{slug}.png"
        fig.savefig(os.path.join(folder, name), dpi=90)
        plt.close(fig)
        made.append(name)
    return made


def _catalog_line(info: dict[str, Any]) -> str:
    cat = info.get("catalog")
    if not cat:
        return (
            "- **large vs small catalog**: not measured in this run (`--catalog-keys 10000000` does it:"
            " long); its rows say n/a."
        )
    where = (
        " Measured apart from the rest of this table, right after it, with"
        " `benchmarks.peers.bigcatalog.compare` (merged by `benchmarks.peers.report.merge_catalog`)."
        if cat.get("separate")
        else ""
    )
    return (
        f"- **large vs small catalog** (`--catalog-keys {cat['large']}`): shardcat and the floor, local, in"
        f" catalogs of {cat['small']:,} and {cat['large']:,} keys of tiny records (8-byte payloads);"
        " p50 of the same number of random point lookups as above, interleaved; the floor is a"
        " `TEXT PRIMARY KEY` table of the same locations + `os.pread` of the record's frame."
        + where
    )


def _s3_line(info: dict[str, Any]) -> str:
    """How S3 was served; results saved before ``--moto`` existed ran it in process."""
    if info.get("moto", "in-process") == "process":
        where = (
            "in its own process (`--moto process`, the default), so that its Python request"
            " handling does not share the GIL with the client being measured, as with a real S3;"
            " the GET bytes it counts are read through a shared memory map"
        )
    else:
        where = (
            "in the benchmark's process (`--moto in-process`): its Python request handling shares"
            " the GIL with the client being measured, which can slow the Python clients (s3fs:"
            " shardcat and the floor) more than Lance's Rust client, which releases the GIL;"
            " `--moto process` (the default) runs it in a process of its own"
        )
    return (
        "- **S3**: moto's server on 127.0.0.1, patched to answer a ranged GET by seek + read (stock"
        " moto reads the whole object per ranged GET); shardcat and the floor use s3fs, Lance its"
        f" own object-store client. The server ran {where}.{_profile_sentence(info)}"
    )


def _proxy_where(info: dict[str, Any]) -> str:
    """Where the run's latency proxy ran (``--proxy``); results saved before it was kept say nothing."""
    return {
        "process": ", in a process of its own (`--proxy process`, the default)",
        "in-process": ", on a thread of the benchmark's process (`--proxy in-process`)",
    }.get(info.get("proxy") or "", "")


def _profile_sentence(info: dict[str, Any]) -> str:
    """The latency profiles the S3 rows ran through (``--profiles``), if any."""
    names = info.get("profiles") or ([info["profile"]] if info.get("profile") else [])
    proxied = [n for n in names if n != "direct"]
    if not proxied:
        return ""
    from benchmarks.latency_proxy import profile

    direct = " The rows `s3:` reached it directly (`direct`)." if "direct" in names else ""
    each = "; ".join(f"`s3 {profile(n).describe()}`" for n in proxied)
    return (
        f" `--profiles {','.join(names)}`: the S3 backend ran once per profile, each on a moto"
        " server of its own (every system wrote its dataset again), one after another."
        f"{direct}"
        f" The rows {each} reached it through the latency proxy (`benchmarks/latency_proxy.py`"
        f"{_proxy_where(info)}): each response's first byte no earlier than"
        " the latency after its request's first byte, each connection's responses held to the"
        " bandwidth; uploads are not capped. moto answers `Connection: close`, so each request"
        " has a connection of its own."
    )


def _rerun_args(argv: list[str]) -> list[str]:
    """The run's arguments without ``--out`` (the doc is rerun into docs/)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def regenerate(results_json: str, out: str, argv: list[str] | None = None) -> str:
    """Write the report again from a run's results.json (e.g. after changing this module)."""
    with open(results_json) as f:
        saved = json.load(f)
    results = [Result(**r) for r in saved["results"]]
    info = saved["info"]
    args = argparse.Namespace(out=out, argv=info.get("argv", []) if argv is None else argv)
    return write_report(results, info, args)


def merge_catalog(results_json: str, catalog: dict[str, Any]) -> None:
    """Put a separate large-vs-small catalog comparison (``bigcatalog.compare``) into a run's results.

    For a catalog too long to build inside the main run (10 million keys): the
    report then says that these rows come from a separate run.
    """
    with open(results_json) as f:
        saved = json.load(f)
    for r in saved["results"]:
        if r["backend"] == "local" and r["system"] in ("shardcat", "floor") and not r["skipped"]:
            at = 0 if r["system"] == "shardcat" else 1
            r["catalog_small_ms"], r["catalog_large_ms"] = (
                catalog["small"][at],
                catalog["large"][at],
            )
    saved["info"]["catalog"] = {
        "small": catalog["small_keys"],
        "large": catalog["large_keys"],
        "separate": True,
    }
    with open(results_json, "w") as f:
        json.dump(saved, f, indent=1)


def write_report(results: list[Result], info: dict[str, Any], args: argparse.Namespace) -> str:
    from benchmarks.peers.goals import section as goals_section  # it imports this module

    folder = os.path.join(args.out, "benchmarks")
    images = plots(results, folder)
    info = {"machine": machine(), **info, "argv": _rerun_args(args.argv)}
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump({"info": info, "results": [asdict(r) for r in results]}, f, indent=1)
    rerun = " ".join(
        ["python", "-m", "benchmarks.peers", *map(shlex.quote, _rerun_args(args.argv))]
    )
    load0 = ", ".join(f"{x:.1f}" for x in info["load_start"])
    load1 = ", ".join(f"{x:.1f}" for x in info["load_end"])
    lines = [
        "# Benchmarks: shardcat, the floor and its peers",
        "",
        "Generated by `benchmarks/peers/` (`python -m benchmarks.peers`); do not edit by hand: rerun it.",
        f"Run of {info['time_start']}: **{info['samples']:,} samples** (scale {info['scale']} of 200,000;"
        f" {info['nbytes'] / 1e6:,.0f} MB of payload + label), string keys `img/00012345` written in"
        " shuffled order, 2-8 KiB random payload + a small JSON label each, 64 MiB shards/files/chunks.",
        "",
        f"Machine: {info.get('machine') or machine()}. {_load_words(info)}: load average {load0} at the start and"
        f" {load1} at the end (1/5/15 min); the ratios to the floor, measured in the same run on the"
        " same keys, are the figures to read.",
        "",
        "Each cell: the value and, in parentheses, its ratio to the floor in the same column's backend"
        " (for times and bytes lower is better, for rates higher is better).",
        "",
        *table(results),
        "",
        "## shardcat against the targets of issue 10 (this run's ratios)",
        "",
        "For a target set against peers, *the floor's own figure* is the floor's ratio to the same"
        " peers: the same work with no format at all. Where the floor misses a target too, the target"
        " asks more of this machine than its SQLite, disk and system calls give without a format.",
        "",
        *targets(results),
        "",
        *goals_section(results, info),
        *run_notes(results, info),
        "## What each column is",
        "",
    ]
    for name, (module, doc) in info["docs"].items():
        first = " ".join(doc.split("\n\n")[0].split())
        rest = " ".join(" ".join(doc.split("\n\n")[1:]).split())
        lines.append(f"- **{name}** (`{module}`): {first} {rest}".rstrip())
    skipped = {(r.system, r.skipped) for r in results if r.skipped}
    if skipped:
        lines += ["", "## Skipped", ""]
        for name, why in sorted(skipped):
            lines.append(f"- **{name}**: {why}")
    lines += [
        "",
        "## How each measure is taken",
        "",
        "- **write MB/s**: payload + label bytes of the dataset / wall time of the system's whole write,"
        " including its catalog or index where it has one (shardcat: a `DatasetWriter` block, each shard"
        " synced to disk before it is published and staged in the catalog once published,"
        " then the job's commit; floor: plain file writes + one sqlite3"
        " `executemany`; Lance: `write_dataset` + the scalar index; neither syncs its files).",
        "- **registration keys/s**: the catalog/index part alone (shardcat: one"
        " `register_shards` of every shard into a fresh catalog, right after the timed write and outside"
        " it; Lance: `create_scalar_index`). The floor is the issue's \"bare bulk insert"
        ' into the same indexed table": one sqlite3 `executemany` in one transaction into a copy of'
        " shardcat's `records` table with its indexes, the same keys, measured right after the floor's"
        " write (its narrow `TEXT PRIMARY KEY` table's rate is in the notes above).",
        f"- **point lookups**: {info['points']['local']:,} random keys locally, {info['points']['s3']:,} on S3,"
        " the same keys for every system, interleaved (each key is looked up by every system in turn, who"
        " goes first rotating) so that the shared machine's load drift hits every system alike; after 50"
        " warm-up lookups each; p50/p99 of wall time per call. Batches are interleaved the same way"
        " (each batch handed to every system in turn). Writes, registration and streaming run one"
        " system after another.",
        "- **bytes fetched**: on S3 the body bytes the moto server sent (counted server side, for every"
        " system alike); locally `rchar` of `/proc/self/io` (bytes of read syscalls of every thread,"
        " page-cache hits included; reads through `mmap` are not seen, so a system reading through `mmap`"
        " shows less than it touched: its cells say `mmap` instead of a number).",
        "- **per CPU-second**: the same work over the CPU time it took (`time.process_time`, every"
        " thread of the harness's process; moto and the latency proxy run in processes of their"
        " own), the median batch by CPU time: what the work cost apart from the machine's load,"
        " which on a shared machine stretches wall time far more than CPU time. *Batch minor page"
        " faults*: of the harness's process during each batch (`getrusage`), the median: memory a"
        " batch faulted in fresh, whose kernel time its CPU time includes.",
        f"- **batch**: {info['batch_repeats']} batches of {info['batch']:,} random keys locally"
        f" ({info.get('s3_batch', info['batch']):,} on S3), the same batches for every system;"
        " keys/s of each system's median batch. Each batch starts after a full collection of the"
        " cyclic GC (untimed): the harness's one process holds every system's objects (~400,000"
        " tracked with all peers loaded), so a full collection costs more than a batch, and"
        " whichever system tipped the collector into one would pay for all. The floor's batch"
        " is one raw query plus sorted `os.pread`s (local) or one `fs.cat_ranges` of every record's own"
        " range, unmerged (S3: the naive floor). Systems with no batch call read the batch's positions"
        " one by one in sorted order.",
        "- **cold first lookup**: in a fresh Python process, the time to import the system's library,"
        " open the dataset and look one key up (interpreter start-up not included; the page cache is warm).",
        "- **streaming MB/s**: every sample once, in the system's own order, dataset bytes / wall time.",
        "- **through the latency proxy** (S3 rows with a profile): *one ranged GET of the record*"
        " is the floor's ranged GET of a point lookup's record alone (`fs.cat_file` with its range),"
        " timed right after the floor's lookup of the same key with its location found untimed;"
        " *batch requests* are the requests the proxy saw during each system's median batch; the"
        " *streaming connections in flight* are the responses of 64 KiB or more (larger than the"
        " proxy's burst, so paced by the bandwidth cap) that the proxy was sending at once during"
        " the system's streaming read, the most at any moment (peak) and the average over the"
        " read's wall time (mean: connection-seconds / seconds); the *line rate* is the peak times"
        " the profile's bandwidth per connection, what the network gives the read with the"
        " connections it opened together.",
        "- **the stand-in's limits** (`benchmarks/peers/standin.py`, the notes' `stand-in` lines):"
        " right after the systems of each S3 backend, on the same moto server and proxy, for"
        " `--standin-seconds` each: small ranged GETs (8 KiB of a public-read 1 MiB object, raw"
        " unsigned `http.client`, the cheapest client, so that the server is what is measured)"
        " per second with 16 at once and one at a time, directly and through the proxy; whole"
        " 8 MiB GETs in MB/s, one at a time directly and through the proxy, and through the"
        " proxy as many at once as shardcat's streaming kept busy at its peak. The goals'"
        " *why* column quotes these figures.",
        "- **checked**: every payload and label returned by every measure (point, batch, cold, streaming)"
        " is compared byte for byte with the source sample; a mismatch stops the run.",
        _s3_line(info),
        _catalog_line(info),
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{img}](benchmarks/{img})" for img in images]
    lines += [
        "",
        "## Versions",
        "",
        *[f"- {k} {v}" for k, v in sorted(info["versions"].items())],
        *([f"- shardcat checkout: commit `{info['commit']}`"] if info.get("commit") else []),
        "",
        "## How to rerun",
        "",
        "The peers come from the optional `bench` extra (Lance, WebDataset + wids, LitData and the CPU"
        " build of torch that LitData needs):",
        "",
        "<!-- not-tested: installs packages into .venv -->",
        "```bash",
        ".venv/bin/pip install -e '.[dev,bench]' -c constraints/dev.txt",
        "```",
        "",
        "then, from the repository root (this run's command; `--scale 0.05` is a quick run,"
        " `--backends local` skips S3):",
        "",
        "<!-- not-tested: a long benchmark that rewrites this file -->",
        "```bash",
        f".venv/bin/{rerun}",
        "```",
        "",
        "Raw results (every latency) are in `docs/benchmarks/results.json`.",
        "",
        "## Elsewhere",
        "",
        "Benchmarks of one part, not of the peers, keep their figures beside the part's documentation:"
        " `shardcat serve` under concurrent HTTP clients against the same framework serving the same"
        " bytes from files (`benchmarks/bench_serve.py`): [SERVE.md, Performance](SERVE.md#performance).",
        "",
    ]
    path = os.path.join(args.out, "BENCHMARKS.md")
    kept = hand_run_sections(path)
    with open(path, "w") as f:
        f.write("\n".join(lines))
        if kept:
            f.write("\n" + kept)
    return path


if __name__ == "__main__":
    # python -m benchmarks.peers.report RESULTS_JSON OUT_DIR [run arguments...]
    import sys

    print(regenerate(sys.argv[1], sys.argv[2], sys.argv[3:] or None))
