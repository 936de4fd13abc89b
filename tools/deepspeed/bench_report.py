#!/usr/bin/env python3
"""Summary of a tools/deepspeed/bench.sh run: OUT/summary.md, OUT/results.json, OUT/dsbench.png.

    bench_report.py OUT [--no-plot]

Reads OUT/bench.tsv (the run's facts) and OUT/runs/<run>-<target>/ (meta.tsv, rank<R>.json,
memcg.txt). Per run of a target, over steps >= 3 (steps 1-2 create the swap files and warm
the caches): the median step time and parts, and per step the swap bytes DeepSpeed issued,
the bytes each tier's block device moved, the daemon's CPU time and the tierfs cache's hits.
Per target: the median of the runs' medians with min and max over runs. Losses (all ranks),
eval losses and the final parameter digest are compared with the nvme target's first run.
The PNG needs matplotlib; everything else only the standard library.
Exit status: 1 when a loss or digest differs from the reference, else 0.
"""

import glob
import json
import os
import statistics
import sys

FIRST = 3  # the first step the medians and per-step figures use (1-based)


def read_tsv(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            if "\t" in line:
                k, v = line.rstrip("\n").split("\t", 1)
                if k == "extra_target":
                    out.setdefault(k, []).append(v)
                else:
                    out.setdefault(k, v)
    return out


def med(v):
    return statistics.median(v) if v else None


def window(samples, first):
    """The samples that bound steps first..last: before step `first`, after the last step."""
    a = next((s for s in samples if s["label"] == f"before step {first}"), None)
    b = next((s for s in samples if s["label"] == "after last step"), None)
    return a, b


def delta(a, b, *path):
    for k in path:
        a = a.get(k) if isinstance(a, dict) else None
        b = b.get(k) if isinstance(b, dict) else None
    if a is None or b is None:
        return None
    return b - a


def run_figures(d):
    """Per-run numbers from one runs/<run>-<target> folder."""
    meta = read_tsv(os.path.join(d, "meta.tsv"))
    r = {"dir": os.path.basename(d), "target": meta.get("target"), "run": int(meta.get("run", 0)),
         "position": int(meta.get("position", 0)), "status": meta.get("status", "unknown"), "meta": meta}
    memcg = {}
    if os.path.exists(os.path.join(d, "memcg.txt")):
        for line in open(os.path.join(d, "memcg.txt")):
            parts = line.split()
            if len(parts) == 2:
                memcg[parts[0]] = int(parts[1])
            elif len(parts) == 3:
                memcg[f"{parts[0]}.{parts[1]}"] = int(parts[2])
    r["memcg"] = memcg
    ranks = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, "rank*.json")),
                                                 key=lambda f: int(os.path.basename(f)[4:-5]))]
    if r["status"] != "ok" or not ranks:
        return r
    r0 = ranks[0]
    n = len(r0["step_s"])
    k = n - FIRST + 1  # steps in the window
    r["steps"] = n
    r["n_params"] = r0["n_params"]
    r["step_s"] = r0["step_s"]
    for part in ("step_s", "fwd_s", "bwd_s", "opt_s"):
        r[part.replace("_s", "") + "_median"] = med(r0[part][FIRST - 1:])
    r["init_s"] = r0["init_s"]
    r["swap_read_per_step"] = sum(x["swap"][n][0] - x["swap"][FIRST - 1][0] for x in ranks) / k
    r["swap_write_per_step"] = sum(x["swap"][n][1] - x["swap"][FIRST - 1][1] for x in ranks) / k
    r["swap_files"] = r0.get("swap_files")
    # The direct path (`tierfs run`): bytes and leases over the whole mount (stats at mount and
    # after the training), against DeepSpeed's own swap bytes up to the last step.
    try:
        s0 = json.load(open(os.path.join(d, "stats-start.json")))
        s1 = json.load(open(os.path.join(d, "stats-end.json")))
        tot = lambda s, k: sum(t.get(k, 0) or 0 for t in s.get("tiers", []))
        r["direct_bytes"] = tot(s1, "direct_bytes") - tot(s0, "direct_bytes")
        r["direct_opens"] = tot(s1, "direct_opens") - tot(s0, "direct_opens")
        r["swap_bytes_total"] = sum(x["swap"][n][0] + x["swap"][n][1] for x in ranks)
        r["direct_of_swap"] = r["direct_bytes"] / r["swap_bytes_total"] if r["swap_bytes_total"] else None
        c0, c1 = s0.get("cpu") or {}, s1.get("cpu") or {}
        if "total_s" in c0 and "total_s" in c1 and c1.get("bytes", 0) > c0.get("bytes", 0):
            r["daemon_cpu_s_per_gb_stats"] = (c1["total_s"] - c0["total_s"]) / ((c1["bytes"] - c0["bytes"]) / 1e9)
    except (OSError, ValueError, KeyError):
        pass
    r["losses"] = [x["losses"] for x in ranks]
    r["eval_losses"] = [x["eval_loss"] for x in ranks]
    r["param_sha256"] = r0["param_sha256"]
    r["digests_agree_across_ranks"] = len({x["param_sha256"] for x in ranks}) == 1
    a, b = window(r0.get("samples", []), FIRST)
    if a and b:
        cpu = delta(a, b, "daemon_cpu_s")
        r["daemon_cpu_per_step"] = cpu / k if cpu is not None else None
        dev = {}
        for name in (b.get("dev") or {}):
            da, db = (a.get("dev") or {}).get(name), b["dev"].get(name)
            if da and db:
                dev[name] = {"read_per_step": (db[0] - da[0]) / k, "write_per_step": (db[1] - da[1]) / k}
        r["device"] = dev
        tf_a, tf_b = a.get("tierfs"), b.get("tierfs")
        if tf_a and tf_b and "tiers" in tf_b:
            r["tierfs_tiers"] = {
                name: {"read_per_step": (delta(tf_a, tf_b, "tiers", name, "bytes_read") or 0) / k,
                       "write_per_step": (delta(tf_a, tf_b, "tiers", name, "bytes_written") or 0) / k,
                       "share": t.get("share"), "paused": t.get("paused"),
                       "passthrough_opens_per_step": (delta(tf_a, tf_b, "tiers", name, "passthrough_opens") or 0) / k}
                for name, t in tf_b["tiers"].items()}
            if tf_b.get("cache"):
                c = {key: (delta(tf_a, tf_b, "cache", key) or 0) / k for key in (
                    "hit_bytes", "miss_bytes", "prefetch_bytes", "prefetch_used_bytes", "prefetch_wasted_bytes",
                    "absorbed_bytes", "writeback_bytes")}
                c["reread_bytes"] = max(0.0, c["hit_bytes"] - c["prefetch_used_bytes"])
                c["size"] = tf_b["cache"].get("size")
                r["cache_per_step"] = c
            r["relayout_end"] = tf_b.get("relayout")
    return r


def fmt_range(v, f="{:.2f}"):
    if not v:
        return "-"
    return f"{f.format(med(v))} ({f.format(min(v))}-{f.format(max(v))})"


def gb(x):
    return "-" if x is None else f"{x / 1e9:.2f}"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    plot = "--no-plot" not in sys.argv[2:]
    g = read_tsv(os.path.join(out, "bench.tsv"))
    targets = g.get("targets", "").split()
    runs = [run_figures(d) for d in sorted(glob.glob(os.path.join(out, "runs", "*-*")))]
    by_t = {t: sorted([r for r in runs if r["target"] == t], key=lambda r: r["run"]) for t in targets}
    ok = {t: [r for r in rs if r["status"] == "ok"] for t, rs in by_t.items()}

    # Reference for the exact comparison: the shm target's first good run (else the first good
    # run). Not nvme: with DeepSpeed 0.19.8 and this model, swap folders on ext4 (the local disk,
    # both tierbed tiers) train to other losses than a /dev/shm folder and than no swap at all
    # (CPU offload), which agree with each other, so ext4's figures are not the truth to match.
    ref = (ok.get("shm") or [None])[0] or next((r for t in targets for r in ok[t]), None)
    mismatches = []
    # Plain folders (no tierfs) whose mismatch is DeepSpeed's on that file system, not ours.
    plain = {"shm", "nvme", "pfs"}
    plain_mismatches = []
    for t in targets:
        for r in ok[t]:
            why = []
            if ref is not None and r is not ref:
                if r["losses"] != ref["losses"]:
                    steps = sorted({i + 1 for a, b in zip(r["losses"], ref["losses"])
                                    for i in range(max(len(a), len(b))) if a[i:i + 1] != b[i:i + 1]})
                    why.append(f"losses differ at steps {steps}")
                if r["eval_losses"] != ref["eval_losses"]:
                    why.append("eval losses differ")
                if r["param_sha256"] != ref["param_sha256"]:
                    why.append("final parameters differ")
            if not r["digests_agree_across_ranks"]:
                why.append("ranks disagree on the parameter digest")
            if why:
                # Equal to a plain ext4 folder's run instead? (the direct path hands DeepSpeed
                # the tier files themselves; see README.md, "Which run is the truth")
                same = [f"{p['target']} run {p['run']}" for pt in ("nvme", "pfs") for p in ok.get(pt, [])
                        if p is not r and p["losses"] == r["losses"] and p["eval_losses"] == r["eval_losses"]
                        and p["param_sha256"] == r["param_sha256"]]
                if same:
                    why.append("bit-identical to " + ", ".join(same))
            r["identical_to_reference"] = not why
            r["mismatch"] = "; ".join(why)
            if why:
                (plain_mismatches if t in plain else mismatches).append(
                    f"{t} run {r['run']}: {'; '.join(why)}")

    summary = {}
    for t in targets:
        rs = ok[t]
        s = {"runs": len(by_t[t]), "ok": len(rs),
             "failed": [f"run {r['run']}: {r['status']}" for r in by_t[t] if r["status"] != "ok"]}
        for key in ("step_median", "fwd_median", "bwd_median", "opt_median", "daemon_cpu_per_step",
                    "swap_read_per_step", "swap_write_per_step", "direct_bytes", "direct_opens",
                    "direct_of_swap", "daemon_cpu_s_per_gb_stats"):
            v = [r[key] for r in rs if r.get(key) is not None]
            s[key] = {"median": med(v), "min": min(v) if v else None, "max": max(v) if v else None, "runs": v}
        for tier in ("nvme", "pfs"):
            for d in ("read", "write"):
                v = [r["device"][tier][f"{d}_per_step"] for r in rs if tier in r.get("device", {})]
                s[f"dev_{tier}_{d}_per_step"] = med(v)
        c = [r["cache_per_step"] for r in rs if r.get("cache_per_step")]
        if c:
            s["cache_per_step"] = {k: med([x[k] for x in c]) for k in c[0] if c[0][k] is not None}
        peaks = [r["memcg"].get("max_usage_in_bytes") for r in rs if r["memcg"].get("max_usage_in_bytes")]
        s["memcg_peak"] = max(peaks) if peaks else None
        s["memcg_failcnt"] = sum(r["memcg"].get("failcnt", 0) for r in rs) if peaks else None
        s["memcg_oom_kills"] = sum(r["memcg"].get("oom_control.oom_kill", 0) for r in rs) if peaks else None
        s["identical"] = [r.get("identical_to_reference") for r in rs]
        blk = sorted({r["meta"].get("daemon_blkio", "") for r in rs if r["meta"].get("daemon_blkio")})
        s["daemon_blkio"] = blk
        s["daemon_memcg"] = sorted({r["meta"].get("daemon_memcg", "") for r in rs if r["meta"].get("daemon_memcg")})
        s["daemon_user"] = sorted({r["meta"].get("daemon_user", "") for r in rs if r["meta"].get("daemon_user")})
        summary[t] = s

    def step(t):
        return (summary.get(t) or {}).get("step_median", {}).get("median")

    nvme_s, shm_s = step("nvme"), step("shm")
    for t in targets:
        s = summary[t]
        m = step(t)
        s["vs_nvme"] = m / nvme_s if (m and nvme_s) else None
        s["io_stall_s"] = m - shm_s if (m is not None and shm_s is not None) else None

    # ---- markdown ----
    L = []
    P = L.append
    limit = int(g["memcg_limit"]) if g.get("memcg_limit") else None
    swap_step = [v for t in targets for v in summary[t]["swap_read_per_step"]["runs"]]
    swap_w = [v for t in targets for v in summary[t]["swap_write_per_step"]["runs"]]
    nparams = g.get("n_params")
    P(f"Command: `{g.get('command', '')}`{' (QUICK)' if g.get('quick') == '1' else ''}; tierfs {g.get('rev', '?')} "
      f"({g.get('tierfs', '')}); {g.get('start', '')} to {g.get('end', '')}; {g.get('cpus', '?')} cores, kernel "
      f"{g.get('kernel', '')}; load average {g.get('load_start', '?')} at start, {g.get('load_end', '?')} at end.")
    P("")
    P(f"Training: real DeepSpeed (`tools/deepspeed/train_bench.py {g.get('model_args', '')}`), CPU, "
      f"{g.get('ranks')} ranks (gloo), ZeRO-3, bf16, offload_param and offload_optimizer on nvme, pin_memory false; "
      f"{int(nparams) / 1e6 if nparams else 0:.1f}M parameters; {g.get('steps')} steps per run, medians over steps "
      f">= {FIRST}; {g.get('runs')} run(s), targets interleaved, order rotated per run. Swap traffic per step "
      f"(DeepSpeed's aio requests, all ranks): {gb(med(swap_step))} GB read + {gb(med(swap_w))} GB written; swap "
      f"files {gb(float(g['swap_set_bytes'])) if g.get('swap_set_bytes') else '-'} GB. DeepSpeed aio and offload "
      f"settings from `tierfs ds-config` (setup/ds-config.json).")
    P("")
    P(f"Tiers (tierbed): {g.get('caps', '')}. Daemon memory cgroup (v1): limit "
      f"{limit / 2**20:.0f} MiB ({g.get('memcg_how', '')})." if limit else "")
    P("")
    P("| target | step s, median (min-max) | fwd / bwd / opt s | vs nvme alone | I/O stall s | daemon CPU s/step "
      "| nvme GB/step r / w | pfs GB/step r / w | memory hits GB/step: prefetched / re-read | daemon memory peak MiB "
      "| losses + params identical |")
    P("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in targets:
        s = summary[t]
        if not s["ok"]:
            P(f"| {t} | FAILED ({'; '.join(s['failed'])[:120]}) | | | | | | | | | |")
            continue
        sm = s["step_median"]
        parts = " / ".join("-" if s[p]["median"] is None else f"{s[p]['median']:.2f}"
                           for p in ("fwd_median", "bwd_median", "opt_median"))
        vs = "-" if s["vs_nvme"] is None else f"{s['vs_nvme']:.2f}x"
        stall = "-" if s["io_stall_s"] is None else f"{s['io_stall_s']:.2f}"
        cpu = s["daemon_cpu_per_step"]
        cpu_txt = "-" if cpu["median"] is None else fmt_range(cpu["runs"], "{:.2f}")
        nv = f"{gb(s['dev_nvme_read_per_step'])} / {gb(s['dev_nvme_write_per_step'])}"
        pf = f"{gb(s['dev_pfs_read_per_step'])} / {gb(s['dev_pfs_write_per_step'])}"
        c = s.get("cache_per_step")
        hits = f"{gb(c['prefetch_used_bytes'])} / {gb(c['reread_bytes'])}" if c else "-"
        peak = "-" if s["memcg_peak"] is None else f"{s['memcg_peak'] / 2**20:.0f}"
        if s["memcg_peak"] is not None and (s["memcg_failcnt"] or s["memcg_oom_kills"]):
            peak += f" (limit hit {s['memcg_failcnt']}x, OOM kills {s['memcg_oom_kills']})"
        ident = s["identical"]
        same = ("yes" if all(ident) else "NO") + f" ({sum(1 for x in ident if x)}/{len(ident)})"
        if s["failed"]:
            same += f"; {len(s['failed'])} failed run(s)"
        P(f"| {t} | {fmt_range(sm['runs'])} | {parts} | {vs} | {stall} | {cpu_txt} | {nv} | {pf} | {hits} | {peak} "
          f"| {same} |")
    P("")
    P("Columns: step = wall clock of one training step on rank 0 between barriers (all ranks done), median of steps "
      f">= {FIRST} per run, then median (min-max) over runs; fwd / bwd / opt = rank 0's wall clock around "
      "engine(x, y), engine.backward(loss), engine.step() (medians); vs nvme alone = step / the nvme target's step; "
      "I/O stall = step - the shm target's step (the compute floor); daemon CPU = the tierfs daemon's utime+stime "
      f"from before step {FIRST} to after the last step, per step; GB/step per tier = the tier's block device "
      "(loop) counters over the same steps, so kernel-passthrough I/O counts too; memory hits = tierfs cache "
      "bytes served from memory per step, prefetched (read ahead, then used) / re-read (already in memory); "
      "daemon memory peak = max_usage_in_bytes of its memory cgroup (memory the daemon's cgroup was charged: "
      "anonymous memory and page cache); identical = losses of every rank at every step, eval losses and the "
      "final parameters' sha256 equal to the reference run's "
      f"({ref['target'] + ' run ' + str(ref['run']) if ref else 'none'}).")
    P("")
    # The direct path and the daemon's CPU per GB, for every tierfs target.
    tf = [t for t in targets if summary[t]["ok"] and summary[t]["direct_bytes"]["runs"]]
    if tf:
        P("| target | under `tierfs run` | direct-path GB per training (median) | direct leases per training | "
          "direct-path bytes / DeepSpeed's swap bytes | daemon CPU s/step | daemon CPU s per GB of swap "
          "(steps >= 3) | daemon CPU s/GB, its own count (whole mount) |")
        P("|---|---|---|---|---|---|---|---|")
        for t in tf:
            s = summary[t]
            runs_t = [r for r in ok[t]]
            under = "yes" if any(r["meta"].get("direct_run") == "1" for r in runs_t) else "no"
            cpu = s["daemon_cpu_per_step"]["median"]
            per_gb = [r["daemon_cpu_per_step"] / ((r["swap_read_per_step"] + r["swap_write_per_step"]) / 1e9)
                      for r in runs_t if r.get("daemon_cpu_per_step") is not None and
                      (r.get("swap_read_per_step") or 0) + (r.get("swap_write_per_step") or 0) > 0]
            dop = s["direct_opens"]["median"]
            dop = "-" if dop is None else f"{dop:.0f}"
            cpu_txt = "-" if cpu is None else fmt_range(s["daemon_cpu_per_step"]["runs"], "{:.3f}")
            P(f"| {t} | {under} | {gb(s['direct_bytes']['median'])} | {dop} | "
              f"{fmt_range(s['direct_of_swap']['runs'], '{:.2f}')} | {cpu_txt} | "
              f"{fmt_range(per_gb, '{:.3f}')} | {fmt_range(s['daemon_cpu_s_per_gb_stats']['runs'], '{:.3f}')} |")
        P("")
        P("Direct-path bytes: the tiers' `direct_bytes` in stats.json from the mount to the end of the training "
          "(set-up, all steps and the eval pass), against DeepSpeed's swap bytes up to the last step (so it can "
          "exceed 1.00 a little); CPU per GB of swap: daemon CPU s per step / swap GB per step, steps >= 3; its "
          "own count: stats.json's cpu.total_s over cpu.bytes (bytes include the direct path's).")
        P("")
    notes = []
    for t in targets:
        s = summary[t]
        for f in s["failed"]:
            notes.append(f"- {t}: {f}")
        if s["daemon_blkio"]:
            capped = all("-> throttled" in b for b in s["daemon_blkio"])
            notes.append(f"- {t}: daemon run by {', '.join(s['daemon_user']) or '?'} in memory cgroup "
                         f"{', '.join(s['daemon_memcg']) or '?'}; tierbed caps apply to it: "
                         f"{'yes' if capped else 'NO'} (`tierbed.sh check`: {'; '.join(s['daemon_blkio'])})")
    if g.get("user_memlock"):
        notes.append(f"- user targets: memory locking for DeepSpeed's aio buffers: {g['user_memlock']}")
    for m in mismatches:
        notes.append(f"- MISMATCH {m}")
    for m in plain_mismatches:
        notes.append(f"- differs from the reference, a plain folder (DeepSpeed on that file system, "
                     f"not tierfs; see tools/deepspeed/README.md): {m}")
    if notes:
        P("Notes:")
        P("")
        L.extend(notes)
        P("")
    P("Per run (step s median of steps >= 3; position in that run's order):")
    P("")
    P("| target | " + " | ".join(f"run {i}" for i in range(1, int(g.get("runs", 1)) + 1)) + " |")
    P("|---|" + "---|" * int(g.get("runs", 1)))
    for t in targets:
        cells = []
        for i in range(1, int(g.get("runs", 1)) + 1):
            r = next((r for r in by_t[t] if r["run"] == i), None)
            if r is None:
                cells.append("-")
            elif r["status"] != "ok":
                cells.append("FAILED")
            else:
                cells.append(f"{r['step_median']:.2f} (#{r['position']}, load {r['meta'].get('load_before', '?')})")
        P(f"| {t} | " + " | ".join(cells) + " |")
    P("")
    if plot:
        P("![step time per target](dsbench.png)")
    md = "\n".join(L) + "\n"
    open(os.path.join(out, "summary.md"), "w").write(md)
    json.dump({"bench": g, "summary": summary, "runs": runs,
               "reference": ref["dir"] if ref else None, "mismatches": mismatches,
               "plain_mismatches": plain_mismatches},
              open(os.path.join(out, "results.json"), "w"), indent=1, default=str)
    if plot:
        try:
            make_plot(out, targets, summary, g)
        except ImportError as e:
            print(f"bench_report: no plot ({e})", file=sys.stderr)
    return 1 if mismatches else 0


def make_plot(out, targets, summary, g):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [t for t in targets if summary[t]["ok"]]
    x = range(len(ts))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 5.2), gridspec_kw={"width_ratios": [1.3, 1.3, 0.8]})
    bottoms = [0.0] * len(ts)
    colors = {"fwd_median": "#88ccee", "bwd_median": "#44aa99", "opt_median": "#ddcc77"}
    for part, label in (("fwd_median", "forward"), ("bwd_median", "backward"), ("opt_median", "optimizer step")):
        v = [summary[t][part]["median"] or 0 for t in ts]
        ax1.bar(x, v, 0.6, bottom=bottoms, color=colors[part], label=label, edgecolor="black", linewidth=0.4)
        bottoms = [b + a for a, b in zip(v, bottoms)]
    m = [summary[t]["step_median"]["median"] for t in ts]
    lo = [m_ - summary[t]["step_median"]["min"] for m_, t in zip(m, ts)]
    hi = [summary[t]["step_median"]["max"] - m_ for m_, t in zip(m, ts)]
    ax1.errorbar(x, m, yerr=[lo, hi], fmt="o", color="black", ms=3, capsize=4, label="step (median, min-max)")
    for i, t in enumerate(ts):
        vs = summary[t]["vs_nvme"]
        ax1.annotate(f"{m[i]:.2f}s" + (f"\n{vs:.2f}x" if vs else ""), (i, m[i] + hi[i]), ha="center",
                     va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    for ref, style in (("shm", ":"), ("nvme", "--")):
        if summary.get(ref, {}).get("ok"):
            ax1.axhline(summary[ref]["step_median"]["median"], ls=style, color="gray", lw=0.8)
    ax1.set_xticks(list(x), ts, rotation=20, ha="right")
    ax1.set_ylabel("seconds per step")
    ax1.set_title(f"step time, steps >= {FIRST} (lower is better)")
    ax1.margins(y=0.15)
    ax1.legend(fontsize=8, loc="lower right")

    w = 0.2
    series = (("dev_nvme_read_per_step", "nvme read", "#4477aa", -1.5), ("dev_nvme_write_per_step", "nvme write", "#77aadd", -0.5),
              ("dev_pfs_read_per_step", "pfs read", "#cc6677", 0.5), ("dev_pfs_write_per_step", "pfs write", "#ee99aa", 1.5))
    for key, label, col, off in series:
        ax2.bar([i + off * w for i in x], [(summary[t][key] or 0) / 1e9 for t in ts], w, label=label, color=col)
    ax2.set_xticks(list(x), ts, rotation=20, ha="right")
    ax2.set_ylabel("GB per step (tier block devices)")
    ax2.set_title("bytes per tier per step")
    ax2.legend(fontsize=8)

    cpu = [summary[t]["daemon_cpu_per_step"]["median"] for t in ts]
    ax3.bar([i for i, c in enumerate(cpu) if c is not None], [c for c in cpu if c is not None], 0.6, color="#999933")
    ax3.set_xticks(list(x), ts, rotation=20, ha="right")
    ax3.set_ylabel("CPU s per step")
    ax3.set_title("tierfs daemon CPU")
    lim = g.get("memcg_limit")
    fig.suptitle(f"DeepSpeed ZeRO-3, {g.get('ranks')} ranks, CPU; tiers {g.get('caps', '')}; "
                 f"daemon memcg {int(lim) / 2**20:.0f} MiB; {g.get('runs')} run(s); load {g.get('load_start', '')}"
                 if lim else "DeepSpeed ZeRO-3", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "dsbench.png"), dpi=110)


if __name__ == "__main__":
    sys.exit(main())
