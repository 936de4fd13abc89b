#!/usr/bin/env python3
"""What tierfs should give a real training node, from figures measured on small machines.

A model, not a measurement (issue #14 asks for it): the step time of DeepSpeed
ZeRO-Infinity on one node whose swap traffic goes to its NVMe drives alone, against the
same node with tierfs splitting it between the NVMe drives and the parallel file system
by bandwidth (the paper's Eq. 1: every tier finishes together), and the CPU the tierfs
daemon needs for that.

The model, per node and step:
  - NVMe alone: the I/O part of the step is `phi` of the step (the rest, compute the I/O
    does not hide, is `1 - phi`); its I/O time scales as 1 / B_nvme.
  - tierfs, ideal split: the I/O time scales as 1 / (B_nvme + B_pfs), so the step is
    (1 - phi) + phi * B_nvme / (B_nvme + B_pfs) of the NVMe-alone step.
  - The daemon's CPU: bytes that cross it cost `c` CPU-seconds per GB. As root (the
    defaults: whole files, the fast tier's in kernel passthrough) only the slow tier's
    share crosses it, at B_pfs GB/s while the I/O runs; as an ordinary user (no
    passthrough) every byte does, at B_nvme + B_pfs GB/s. Cores needed = c * that rate.
    Cores the training needs for itself are not spare: where the daemon's cores are not
    spare, each of its CPU-seconds adds to the step, as on the 2-core bench machine.
  - Under `tierfs run` (the direct path, issue 39) the program reads and writes the tier
    files itself, as root or as a user; the daemon still answers opens, takes the library's
    reports and runs its estimator, at `c_run` CPU-seconds per GB moved (all bytes, the
    direct ones included: stats.json's cpu.s_per_gb). Cores needed = c_run * (B_nvme +
    B_pfs), for root and user alike.
  - The paper's 2.5x (step 0.40 of before) from the split alone would need
    B_pfs / B_nvme >= 1 / r - 1 with r = (phi - 0.6) / phi; below that the gain must come
    from moving fewer bytes (see PERFORMANCE.md).

Defaults: a 4-GPU node with 4 NVMe drives (25 GB/s), Lustre at 2 and 5 GB/s per node,
phi 0.9 and 0.99 (the paper: swap I/O is ~99 % of the update phase), and the daemon
costs measured in docs/PERFORMANCE.md (0.61-0.63 CPU-s/GB on /dev/fuse under fio,
0.71 under real DeepSpeed as a user, up to 1.37 in CI's smoke test beside a CPU-bound
trainer).

The direct path's defaults (--run-cpu) are measured in docs/PERFORMANCE.md, "The direct
path: tierfs run (session 19, issue 39)": RUN_CPU_DEFAULT below.

Usage: tools/realscale-model.py [--nvme GBS] [--pfs GBS,...] [--phi F,...]
                                [--cpu S_PER_GB,...] [--run-cpu S_PER_GB,...]
Prints a markdown table per phi.
"""
import argparse


# Daemon CPU-s per GB moved under `tierfs run`, as an ordinary user (PERFORMANCE.md, issue 39):
# fio (O_DIRECT libaio, 4 files of 1 GiB), the DeepSpeed replay, and real DeepSpeed (per GB of
# swap, 2 cores free; its 1-5 MB swap files cost a FUSE open and a grant each: per-open costs)
RUN_CPU_DEFAULT = [0.002, 0.015, 0.17]


def floats(s):
    return [float(x) for x in s.split(",") if x]


def split_ratio(bn, bp):
    """I/O time with the ideal split, relative to the NVMe alone."""
    return bn / (bn + bp)


def step_ratio(phi, bn, bp):
    return (1 - phi) + phi * split_ratio(bn, bp)


def needed_pfs_for(target, phi, bn):
    """B_pfs that the split alone needs for a step of `target` (relative), or None."""
    r = (phi - (1 - target)) / phi
    if r <= 0:
        return None
    return bn * (1 / r - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvme", type=float, default=25.0, help="NVMe GB/s per node [25]")
    ap.add_argument("--pfs", type=floats, default=[2.0, 5.0], help="PFS GB/s per node [2,5]")
    ap.add_argument("--phi", type=floats, default=[0.9, 0.99],
                    help="I/O part of the NVMe-alone step [0.9,0.99]")
    ap.add_argument("--cpu", type=floats, default=[0.62, 0.71, 1.37],
                    help="daemon CPU-s per GB that crosses it [0.62,0.71,1.37]")
    ap.add_argument("--run-cpu", type=floats, default=RUN_CPU_DEFAULT,
                    help="daemon CPU-s per GB moved under `tierfs run` [%s]" % ",".join(f"{c:g}" for c in RUN_CPU_DEFAULT))
    a = ap.parse_args()
    bn = a.nvme
    for phi in a.phi:
        print(f"\nNVMe {bn:g} GB/s per node, I/O {phi:.0%} of the NVMe-alone step\n")
        cpus = " | ".join(f"cores at {c:g} s/GB root / user" for c in a.cpu)
        runs = "".join(f" user under `tierfs run` at {c:g} s/GB |" for c in a.run_cpu)
        print(f"| PFS GB/s | I/O time vs NVMe alone | step vs NVMe alone | {cpus} |{runs}")
        print("|" + "---|" * (3 + len(a.cpu) + len(a.run_cpu)))
        for bp in a.pfs:
            cores = " | ".join(f"{c * bp:.1f} / {c * (bn + bp):.1f}" for c in a.cpu)
            rc = "".join(f" {c * (bn + bp):.2f} |" for c in a.run_cpu)
            print(f"| {bp:g} | {split_ratio(bn, bp):.3f}x | {step_ratio(phi, bn, bp):.3f}x | {cores} |{rc}")
        need = needed_pfs_for(0.4, phi, bn)
        if need is None:
            print("\nA 0.40x step (the paper's 2.5x) is out of reach of the split alone at this phi.")
        else:
            print(f"\nA 0.40x step (the paper's 2.5x) from the split alone needs a PFS of "
                  f"{need:.1f} GB/s per node ({need / bn:.2f}x the NVMe's bandwidth).")


if __name__ == "__main__":
    main()
