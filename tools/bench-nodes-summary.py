#!/usr/bin/env python3
"""The report of a tools/bench-nodes.sh run, from the files it leaves in OUT: OUT/summary.md
(markdown table), OUT/results.csv (one row per node and run: what a plot is drawn from),
OUT/results.json (the same rows, the per-N-and-target summary and the run's parameters) and,
with matplotlib, the plot OUT/bench-nodes.png (or --png PATH; --no-plot for none).

Per node and run it reads: the replay's JSON (optimizer-step I/O seconds, OUT/res/TAG-nodeI.json)
and the same node's `direct` run (its fast tier alone); the daemon's CPU seconds over the
replay (utime + stime of its /proc/PID/stat, in TAG.meta.json); the node's stats.json before
and after the replay (bytes its tiers moved, direct_bytes among them, staging size); the
pause/resume lines of its daemon log between the replay's start and end; the recorded slow
tier share (`tierfs record`, OUT/rec). Each node's ledger view over time goes to
OUT/rec/*.shared.tsv.

Usage: tools/bench-nodes-summary.py OUT [--png PATH | --no-plot]
"""
import csv
import glob
import json
import os
import re
import statistics as st
import sys

FLIP = re.compile(r"^(\d+(?:\.\d+)?) .*tier '[^']+' (paused|resumed)")


# What a node's figure measures: the replay's optimizer-step I/O, or (WORKLOAD=ds) the step.
WHAT = "optimizer-step I/O"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def opt_median(path, warmup):
    j = load(path)
    if not j:
        return None
    v = [p["io_s"] for p in j.get("phases", []) if p["phase"] == "optimizer"][warmup:]
    return st.median(v) if v else None


def flips(log, t0, t1):
    """Pause/resume lines of a daemon log stamped within [t0, t1] (epoch seconds)."""
    n = 0
    try:
        with open(log, errors="replace") as f:
            for line in f:
                m = FLIP.match(line)
                if m and t0 <= float(m.group(1)) <= t1:
                    n += 1
    except OSError:
        return None
    return n


def moved(start, end):
    """(bytes all tiers moved, of them on the direct path) between two stats.json."""
    if not start or not end:
        return None, None
    def total(s, key):
        return sum(t.get(key, 0) for t in s["tiers"])
    all_b = sum(total(end, k) - total(start, k) for k in ("bytes_read", "bytes_written"))
    return all_b, total(end, "direct_bytes") - total(start, "direct_bytes")


def slow_share(rec, slow):
    """Median share of the slow tier over a node's record (the first 3 samples left out)."""
    vals = []
    try:
        with open(rec) as f:
            for line in list(f)[3:]:
                for t in json.loads(line)["tiers"]:
                    if t["name"] == slow:
                        vals.append(t["share"])
    except (OSError, ValueError, KeyError):
        return None
    return st.median(vals) if vals else None


def shared_tsv(rec, slow):
    with open(rec[: -len(".jsonl")] + ".shared.tsv", "w") as tsv:
        tsv.write("elapsed_s\tshare\tshared_live\tshared_allot_MBps\tsaturated\tpaused\n")
        for line in open(rec):
            try:
                smp = json.loads(line)
            except ValueError:
                continue
            for t in smp["tiers"]:
                if t["name"] == slow:
                    a = t.get("shared_allot_bps")
                    tsv.write(f'{smp["elapsed_s"]:.1f}\t{t["share"]:.3f}\t{t.get("shared_live") or "-"}\t'
                              f'{"-" if a is None else f"{a / 1e6:.0f}"}\t{t.get("saturated", False)}\t'
                              f'{t.get("paused", False)}\n')


def node_rows(out, p):
    """One dict per node and run of every target but `direct`."""
    rows = []
    w = p.get("warmup", 0)
    for mf in sorted(glob.glob(f"{out}/res/N*-r*.meta.json")):
        m = load(mf)
        if not m or m["target"] == "direct":
            continue
        n, tg, r = m["n"], m["target"], m["run"]
        tag = f"N{n}-{tg}-r{r}"
        cpu = m.get("daemon_cpu_s") or []
        t0 = m.get("t0")
        for i in range(1, n + 1):
            res = f"{out}/res/{tag}-node{i}"
            a = opt_median(f"{res}.json", w)
            b = opt_median(f"{out}/res/N{n}-direct-r{r}-node{i}.json", w)
            end = load(f"{res}.stats-end.json")
            all_b, direct_b = moved(load(f"{res}.stats-start.json"), end)
            c = cpu[i - 1] if i - 1 < len(cpu) else None
            fl = flips(f"{out}/logs/{tag}-node{i}.log", t0, t0 + m["wall_s"]) if t0 else None
            mem = (m.get("memcg") or [])[i - 1: i]
            cache = (end or {}).get("cache") or {}
            rows.append({
                "n": n, "target": tg, "run": r, "node": i, "busy": os.path.exists(f"{res}.json"),
                "fail": m["fail"], "wall_s": m["wall_s"],
                "opt_io_s": a, "fast_alone_opt_io_s": b, "ratio": a / b if a and b else None,
                "daemon_cpu_s": c, "moved_bytes": all_b, "direct_bytes": direct_b,
                "cpu_s_per_gb": c / (all_b / 1e9) if c is not None and all_b else None,
                "direct_fraction": direct_b / all_b if all_b else None,
                "flips": fl, "flips_per_min": fl / (m["wall_s"] / 60) if fl is not None else None,
                "slow_share": slow_share(f"{out}/rec/{tag}-node{i}.jsonl", p["slow_tier"]),
                "staging_bytes": cache.get("size"), "staging_from": cache.get("size_from"),
                "memcg_max_usage": mem[0]["max_usage"] if mem else None,
                "oom_kills": mem[0]["oom_kills"] if mem else None,
                "machine_busy": m["machine_busy"], "load_start": m["load_start"], "load_end": m["load_end"],
            })
    return rows


def per_node(rows, key, fmt):
    """'1: median (min-max); 2: ...' over runs, for the nodes that have the figure."""
    by = {}
    for x in rows:
        if x[key] is not None:
            by.setdefault(x["node"], []).append(x[key])
    cells = []
    for i, v in sorted(by.items()):
        cell = f"{i}: {fmt(st.median(v))}"
        if len(v) > 1:
            cell += f" ({fmt(min(v))}-{fmt(max(v))})"
        cells.append(cell)
    return "; ".join(cells) or "-", {i: st.median(v) for i, v in by.items()}


def summarize(rows, p):
    hm = lambda r, w: 2 * r * w / (r + w)
    F, P = hm(*p["fast"]), hm(*p["slow"])
    groups = {}
    for x in rows:
        groups.setdefault((x["n"], x["target"]), []).append(x)
    order = {t: k for k, t in enumerate(p["targets"])}
    summary = []
    for (n, tg), g in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        ratios = [x["ratio"] for x in g if x["ratio"] is not None]
        cells = {k: per_node(g, k, f) for k, f in (
            ("ratio", lambda v: f"{v:.2f}"), ("cpu_s_per_gb", lambda v: f"{v:.3f}"),
            ("direct_fraction", lambda v: f"{100 * v:.0f}%"), ("flips_per_min", lambda v: f"{v:.1f}"),
            ("slow_share", lambda v: f"{100 * v:.1f}%"))}
        node_meds = list(cells["ratio"][1].values())
        summary.append({
            "n": n, "target": tg, "floor": F / (F + P / n),
            "ratio_median": st.median(node_meds) if node_meds else None,
            "ratio_worst": max(ratios) if ratios else None,
            "ratio_min": min(ratios) if ratios else None,
            "per_node": {k: {str(i): v for i, v in c[1].items()} for k, c in cells.items()},
            "cells": {k: c[0] for k, c in cells.items()},
            "machine_busy": st.median(x["machine_busy"] for x in g),
            "loads": sorted({f'{x["load_start"].split()[0]} -> {x["load_end"].split()[0]}' for x in g}),
            "staging_bytes": max((x["staging_bytes"] or 0 for x in g), default=0),
            "memcg_max_usage": max((x["memcg_max_usage"] or 0 for x in g), default=0),
            "oom_kills": sum(x["oom_kills"] or 0 for x in g),
            "fails": sorted({f"N{n}-{tg}-r{x['run']}" for x in g if x["fail"]}),
        })
    return F, P, summary


def direct_rows(out, p):
    d = {}
    for f in glob.glob(f"{out}/res/N*-direct-r*-node*.json"):
        m = re.match(r".*/N(\d+)-direct-r\d+-node\d+\.json$", f)
        v = opt_median(f, p.get("warmup", 0))
        if m and v:
            d.setdefault(int(m.group(1)), []).append(v)
    return d


def markdown(p, F, P, summary, direct):
    f2 = lambda v: "-" if v is None else f"{v:.2f}"
    mib = lambda b: f"{b / 2**20:.0f} MiB"
    L = [f"Command: `{p['command']}` (scenario {p['scenario']}).",
         f"Tiers (tierbed): per node a fast tier {p['fast'][0]}/{p['fast'][1]} MB/s (F = {F:.0f} MB/s), one "
         f"shared slow tier {p['slow'][0]}/{p['slow'][1]} MB/s (P = {P:.0f} MB/s). "
         + (f"Per node {p['replay_args']}, {p['steps']} steps: the table's ratio is the median "
            f"training step (steps >= 3) against the direct target's, not the optimizer step's I/O; "
            if p['replay_args'].startswith("real DeepSpeed") else
            f"Replay per node: `{p['replay_args']} --steps {p['steps']}`, medians over steps "
            f"{p['warmup'] + 1}-{p['steps']}; a node's swap set {mib(p['swap_set_bytes'])}; ")
         + "daemon memory cgroup "
         f"{'none' if not p['memcg_limit_bytes'] else mib(p['memcg_limit_bytes'])} each. "
         f"Targets ending in -run: the replay under `tierfs run` (direct path), passthrough off.",
         "",
         f"| N | target | {WHAT} vs fast tier alone, per node: median (min-max) over runs | median over nodes "
         "| worst | floor F/(F+P/N) | daemon CPU-s/GB per node | bytes on the direct path per node "
         "| flips/min per node | slow-tier share per node | machine CPU busy | load (start -> end) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        c = s["cells"]
        L.append(f"| {s['n']} | {s['target']} | {c['ratio']} | {f2(s['ratio_median'])} | {f2(s['ratio_worst'])} "
                 f"| {s['floor']:.3f} | {c['cpu_s_per_gb']} | {c['direct_fraction']} | {c['flips_per_min']} "
                 f"| {c['slow_share']} | {100 * s['machine_busy']:.0f}% | {'; '.join(s['loads'])} |")
    for n, v in sorted(direct.items()):
        L.append(f"| {n} | direct (s) | fast tier alone: {WHAT} {st.median(v):.3f} s "
                 f"({min(v):.3f}-{max(v):.3f}) over nodes and runs | | | | | | | | | |")
    staging = max((s["staging_bytes"] for s in summary), default=0)
    peak = max((s["memcg_max_usage"] for s in summary), default=0)
    L += ["", f"Staging memory per daemon: {mib(staging)} at most ({100 * staging / p['swap_set_bytes']:.0f}% "
          f"of a node's swap set); daemon cgroup peak {mib(peak)}; OOM kills "
          f"{sum(s['oom_kills'] for s in summary)}."]
    fails = [f for s in summary for f in s["fails"]]
    if fails:
        L += ["", "Failed runs (see OUT/res/*.log): " + ", ".join(fails)]
    return "\n".join(L) + "\n"


def plot(path, p, summary):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    targets = [t for t in p["targets"] if any(s["target"] == t for s in summary)]
    for k, tg in enumerate(targets):
        g = [s for s in summary if s["target"] == tg and s["ratio_median"] is not None]
        if not g:
            continue
        x = [s["n"] * (1 + 0.03 * (k - len(targets) / 2)) for s in g]
        m = [s["ratio_median"] for s in g]
        err = [[a - s["ratio_min"] for a, s in zip(m, g)], [s["ratio_worst"] - a for a, s in zip(m, g)]]
        ax1.errorbar(x, m, yerr=err, fmt="o-", capsize=4, label=tg)
        cpu = [(s["n"], st.median(s["per_node"]["cpu_s_per_gb"].values()))
               for s in summary if s["target"] == tg and s["per_node"]["cpu_s_per_gb"]]
        if cpu:
            ax2.plot(*zip(*cpu), "o-", label=tg)
    ns = sorted({s["n"] for s in summary})
    ax1.plot(ns, [next(s["floor"] for s in summary if s["n"] == n) for n in ns], "k_--", ms=14, lw=1,
             label="floor F/(F+P/N)")
    ax1.axhline(1.0, color="gray", lw=0.8, ls=":")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(ns) / 1.5, max(ns) * 1.5)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("nodes sharing the slow tier (N)")
        ax.legend(fontsize=8)
    ax1.set_ylabel(f"{WHAT} / fast tier alone")
    ax1.set_title("median over nodes (bars: min-max over node runs)")
    ax2.set_ylabel("daemon CPU-s per GB moved (median over nodes)")
    ax2.set_title("daemon CPU per node")
    ax2.set_ylim(bottom=0)
    fig.suptitle(f"bench-nodes, scenario {p['scenario']}: fast {p['fast'][0]}/{p['fast'][1]}, shared slow "
                 f"{p['slow'][0]}/{p['slow'][1]} MB/s; {p['runs']} run(s) of {p['steps']} steps", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    out, png = args[0], os.path.join(args[0], "bench-nodes.png")
    if args[1:2] == ["--no-plot"]:
        png = None
    elif args[1:2] == ["--png"] and len(args) == 3:
        png = args[2]
    elif len(args) != 1:
        sys.exit(__doc__)
    p = load(f"{out}/params.json")
    if not p:
        sys.exit(f"{out}/params.json: missing; not a tools/bench-nodes.sh folder")
    p.setdefault("slow_tier", "pfs")
    global WHAT
    if p["replay_args"].startswith("real DeepSpeed"):
        WHAT = "training step"
    for rec in sorted(glob.glob(f"{out}/rec/*.jsonl")):
        shared_tsv(rec, p["slow_tier"])
    rows = node_rows(out, p)
    F, P, summary = summarize(rows, p)
    md = markdown(p, F, P, summary, direct_rows(out, p))
    if png:
        try:
            plot(png, p, summary)
            md += f"\n![bench-nodes]({os.path.basename(png)})\n"
        except ImportError as e:
            print(f"bench-nodes-summary: no plot ({e}; run it with a python that has matplotlib)", file=sys.stderr)
    with open(f"{out}/summary.md", "w") as f:
        f.write(md)
    fields = list(rows[0]) if rows else ["n", "target", "run", "node"]
    with open(f"{out}/results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(f"{out}/results.json", "w") as f:
        json.dump({"params": p, "summary": summary, "rows": rows}, f, indent=1)
    print(md, end="")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
