#!/usr/bin/env python3
"""Multi-rank ZeRO-Infinity training run for tools/deepspeed/bench.sh: real DeepSpeed, CPU only.

Launches --ranks processes (one per rank, RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set, gloo), each training the same decoder-only transformer built here (nothing is
downloaded) with ZeRO stage 3, bf16, and both offload_param and offload_optimizer on
`device: nvme` at --nvme-path, pin_memory false. The aio block (and the pipeline and buffer
counts) come from a `tierfs ds-config` JSON (--ds-config), so the run uses what tierfs
recommends for the mount.

Why a launcher of its own instead of the `deepspeed` launcher: bench.sh must start the ranks
as root or as an ordinary user, kill every rank of a run that hangs or fails (by process
id, never by name), and keep nothing running after Ctrl-C; one parent that owns its ranks
does that with no ssh/pdsh layer in between.

Measured per step (rank 0 takes the wall clock; every rank waits at a barrier before and
after each step, so a step ends when the slowest rank is done):
  - step time and its parts: wall clock around engine(x, y), engine.backward(loss) and
    engine.step() on rank 0;
  - swap bytes: every aio read and write DeepSpeed issues (its aio handles are wrapped, so
    the count is what DeepSpeed asked for, whatever the target folder is), per rank;
  - at each step boundary, outside the timed part, rank 0 samples the external counters
    bench.sh names: a daemon's CPU time (/proc/PID/stat), block devices' sectors
    (/sys/block/DEV/stat) and a tierfs stats.json.
Deterministic: fixed seeds, data derived from (rank, step), 1 intra-op thread per rank by
default, torch.use_deterministic_algorithms(True), no dropout; so losses, the eval loss and
the final parameters' digest must be bit-identical wherever nvme_path points.

Output: OUT/rank<R>.json and OUT/rank<R>.log per rank (rank 0's JSON also holds the samples,
the DeepSpeed config and the parameter count); stdout shows rank 0's progress. Exit status: 0 ok, 1 a rank failed or timed out,
2 bad usage.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nvme-path", required=True, help="DeepSpeed nvme_path (swap folder); created if missing")
    p.add_argument("--out", required=True, help="folder for rank<R>.json and rank<R>.log")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (results depend on it)")
    p.add_argument("--batch", type=int, default=2, help="micro batch per rank (sequences)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--sub-group-size", type=int, default=1_000_000,
                   help="ZeRO sub_group_size in elements: many subgroups per rank, as at real scale")
    p.add_argument("--max-in-cpu", type=int, default=0,
                   help="offload_param.max_in_cpu in elements (DeepSpeed's default is 1e9, which would keep "
                        "a model this small in memory; at real scale the model is far larger, so 0: every "
                        "parameter is read from nvme_path in forward and backward and written by the step)")
    p.add_argument("--compute", choices=("fp32", "bf16"), default="fp32",
                   help="arithmetic of the matmuls; parameters, gradients and swap files are bf16 either "
                        "way. fp32 by default: without AVX512-BF16/AMX, CPU bf16 GEMMs run at ~1 GFLOP/s "
                        "against ~50 in fp32, and the compute would swamp the I/O being measured")
    p.add_argument("--ds-config", help="JSON printed by `tierfs ds-config MOUNT --ranks N`: its aio block, "
                                       "offload_optimizer pipeline_read/pipeline_write/buffer_count and "
                                       "offload_param buffer_count are used")
    p.add_argument("--ds-extra", default="", help="JSON object merged into the DeepSpeed config last")
    p.add_argument("--daemon-pid", type=int, default=0, help="sample this process's CPU time at step boundaries")
    p.add_argument("--block-dev", action="append", default=[], metavar="NAME=DEV",
                   help="sample /sys/block/DEV/stat at step boundaries (repeatable)")
    p.add_argument("--stats-json", default="", help="a tierfs stats.json to sample at step boundaries")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before the launcher kills the ranks")
    p.add_argument("--self-test-corrupt-after", type=int, default=0, metavar="STEP",
                   help="harness self-test: after STEP, rank 0 zeroes the first 4 KiB of its first fp32 "
                        "master-weight swap file, so the comparison with other runs must fail")
    p.add_argument("--master-port", type=int, default=0)
    a = p.parse_args(argv)
    if a.ranks < 1 or a.steps < 1 or a.threads < 1:
        p.error("--ranks, --steps and --threads must be >= 1")
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")
    return a


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# launcher

def launch(args, argv):
    os.makedirs(args.out, exist_ok=True)
    port = args.master_port or free_port()
    env = dict(os.environ)
    env.update({
        "DS_ACCELERATOR": "cpu",
        "WORLD_SIZE": str(args.ranks),
        "LOCAL_SIZE": str(args.ranks),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "PYTHONHASHSEED": "0",
        "DSB_WORKER": "1",
    })
    procs = []

    def kill_all(sig):
        # Each rank leads a process group of its own, with whatever it started (the JIT
        # build's ninja and compilers): signal the whole group.
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def on_signal(signum, _frame):
        kill_all(signal.SIGTERM)
        deadline = time.time() + 10
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            time.sleep(0.1)
        kill_all(signal.SIGKILL)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def die_with_parent():
        # A rank must not outlive its launcher (bench.sh kills the launcher on a timeout).
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    for r in range(args.ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        log = open(os.path.join(args.out, f"rank{r}.log"), "w")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=e,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=die_with_parent))
        log.close()
    print(f"[train_bench] {args.ranks} ranks started (pids {' '.join(str(p.pid) for p in procs)}), "
          f"MASTER_PORT {port}, logs in {args.out}", flush=True)

    # Follow rank 0's log for the progress lines while waiting.
    deadline = time.time() + args.timeout
    pos = 0
    failed = None
    path0 = os.path.join(args.out, "rank0.log")
    while True:
        with open(path0, "rb") as f:
            f.seek(pos)
            chunk = f.read()
        if chunk:
            cut = chunk.rfind(b"\n") + 1
            for line in chunk[:cut].decode(errors="replace").splitlines():
                if line.startswith(("step ", "[train_bench]", "eval loss", "param sha256", "swap ", "Traceback")):
                    print(line, flush=True)
            pos += cut
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad and failed is None:
            failed = f"rank {bad[0][0]} exited with status {bad[0][1]}"
            kill_all(signal.SIGTERM)
            deadline = min(deadline, time.time() + 10)
        if all(c is not None for c in codes):
            break
        if time.time() > deadline:
            if failed is None:
                failed = f"timed out after {args.timeout:.0f} s"
            kill_all(signal.SIGKILL)
            for p in procs:
                p.wait()
            break
        time.sleep(0.2)
    # DeepSpeed's CPU shared-memory all-reduce leaves one /dev/shm file per rank (~70 MB each,
    # named after the uid, address and port) when the ranks exit: remove this run's.
    for f in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_*"):
        try:
            os.unlink(f)
        except OSError:
            pass
    if failed:
        print(f"[train_bench] FAILED: {failed}; see {args.out}/rank*.log", flush=True)
        for r in range(args.ranks):
            with open(os.path.join(args.out, f"rank{r}.log"), errors="replace") as f:
                tail = f.read().splitlines()[-15:]
            print(f"--- rank {r} log tail:\n" + "\n".join(tail), file=sys.stderr, flush=True)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# external counters (rank 0, between steps)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    """utime+stime of the whole process (all threads), seconds; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def dev_bytes(dev):
    """[bytes read, bytes written] of a block device since boot (512-byte sectors)."""
    try:
        with open(f"/sys/block/{dev}/stat") as f:
            v = f.read().split()
        return [int(v[2]) * 512, int(v[6]) * 512]
    except (OSError, IndexError, ValueError):
        return None


def tierfs_sample(path):
    """The counters bench.sh reports from a tierfs stats.json."""
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    out = {"tiers": {}}
    for t in s.get("tiers", []):
        out["tiers"][t["name"]] = {k: t.get(k) for k in (
            "bytes_read", "bytes_written", "device_read", "device_written", "passthrough_opens", "share",
            "paused", "healthy")}
    c = s.get("cache")
    if c:
        out["cache"] = {k: c.get(k) for k in (
            "size", "used", "hit_bytes", "miss_bytes", "absorbed_bytes", "writeback_bytes", "prefetch_bytes",
            "prefetch_used_bytes", "prefetch_wasted_bytes", "evictions")}
    out["relayout"] = s.get("relayout")
    return out


class Sampler:
    def __init__(self, args):
        self.pid = args.daemon_pid
        self.devs = []
        for spec in args.block_dev:
            name, _, dev = spec.partition("=")
            self.devs.append((name, dev or name))
        self.stats_json = args.stats_json

    def __call__(self, label):
        s = {"label": label, "t": time.time()}
        if self.pid:
            s["daemon_cpu_s"] = proc_cpu_s(self.pid)
        if self.devs:
            s["dev"] = {name: dev_bytes(dev) for name, dev in self.devs}
        if self.stats_json:
            s["tierfs"] = tierfs_sample(self.stats_json)
        return s


# ---------------------------------------------------------------------------------------------
# swap byte counter

class SwapCounter:
    """Bytes and requests of every aio read/write DeepSpeed issues (all of its swap I/O goes
    through aio_handle.async_pread/async_pwrite in runtime/swap_tensor/utils.py)."""

    def __init__(self):
        self.read_bytes = self.write_bytes = self.reads = self.writes = 0

    def snapshot(self):
        return [self.read_bytes, self.write_bytes, self.reads, self.writes]

    def install(self):
        from deepspeed.ops.op_builder import AsyncIOBuilder
        counter = self
        orig_load = AsyncIOBuilder.load

        class Handle:
            def __init__(self, real):
                self._real = real

            def __getattr__(self, name):
                return getattr(self._real, name)

            def _count(self, buf, write):
                n = buf.numel() * buf.element_size()
                if write:
                    counter.write_bytes += n
                    counter.writes += 1
                else:
                    counter.read_bytes += n
                    counter.reads += 1

            def async_pread(self, buf, path, *a, **k):
                self._count(buf, False)
                return self._real.async_pread(buf, path, *a, **k)

            def async_pwrite(self, buf, path, *a, **k):
                self._count(buf, True)
                return self._real.async_pwrite(buf, path, *a, **k)

            def sync_pread(self, buf, path, *a, **k):
                self._count(buf, False)
                return self._real.sync_pread(buf, path, *a, **k)

            def sync_pwrite(self, buf, path, *a, **k):
                self._count(buf, True)
                return self._real.sync_pwrite(buf, path, *a, **k)

        class Module:
            def __init__(self, real):
                self._real = real

            def __getattr__(self, name):
                return getattr(self._real, name)

            def aio_handle(self, *a, **k):
                return Handle(self._real.aio_handle(*a, **k))

        def load(builder, *a, **k):
            return Module(orig_load(builder, *a, **k))

        AsyncIOBuilder.load = load


# ---------------------------------------------------------------------------------------------
# one rank

def swap_census(root):
    count = size = 0
    for dirpath, _d, files in os.walk(root):
        for f in files:
            if f.endswith(".tensor.swp"):
                count += 1
                size += os.stat(os.path.join(dirpath, f)).st_size
    return {"count": count, "bytes": size}


def corrupt_master(root, rank):
    """Zero the first 4 KiB of this rank's lowest-numbered fp32 master-weight swap file."""
    d = os.path.join(root, "zero_stage_3", "optimizer", f"rank{rank}")
    masters = sorted((f for f in os.listdir(d)
                      if f.endswith(".tensor.swp") and "_gradient_" not in f and "exp_avg" not in f),
                     key=lambda f: int(f.split("_")[0]))
    victim = os.path.join(d, masters[0])
    fd = os.open(victim, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(4096), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    print(f"[train_bench] SELF-TEST: zeroed the first 4 KiB of {victim}", flush=True)


def ds_settings(path):
    """The parts of a `tierfs ds-config` JSON this run takes (see --ds-config)."""
    if not path:
        aio = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
               "single_submit": False, "overlap_events": True}
        return aio, {}, {}
    with open(path) as f:
        j = json.load(f)
    zo = j.get("zero_optimization", {})
    opt = {k: v for k, v in zo.get("offload_optimizer", {}).items()
           if k in ("pipeline_read", "pipeline_write", "buffer_count")}
    par = {k: v for k, v in zo.get("offload_param", {}).items() if k in ("buffer_count",)}
    return j["aio"], opt, par


def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v
    return a


def worker(args):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("TORCH_EXTENSIONS_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "tierfs", "torch_extensions"))

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import deepspeed
    import deepspeed.comm as dist

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    counter = SwapCounter()
    counter.install()

    V, D, L, H, T = args.vocab, args.d_model, args.layers, args.heads, args.seq

    f32 = args.compute == "fp32"

    class Linear(nn.Linear):
        def forward(self, x):
            if not f32:
                return super().forward(x)
            b = None if self.bias is None else self.bias.float()
            return F.linear(x.float(), self.weight.float(), b).to(x.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.qkv = Linear(D, 3 * D)
            self.proj = Linear(D, D)
            self.ln2 = nn.LayerNorm(D)
            self.fc1 = Linear(D, 4 * D)
            self.fc2 = Linear(4 * D, D)

        def forward(self, x, mask):
            B, T_, _ = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).split(D, dim=-1)
            q = q.view(B, T_, H, D // H).transpose(1, 2)
            k = k.view(B, T_, H, D // H).transpose(1, 2)
            v = v.view(B, T_, H, D // H).transpose(1, 2)
            if f32:
                q, k, v = q.float(), k.float(), v.float()
            # Plain attention (no fused SDPA kernel): deterministic everywhere.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
            att = att.masked_fill(mask[:T_, :T_], float("-inf"))
            att = torch.softmax(att.float(), dim=-1).to(v.dtype)
            y = (att @ v).transpose(1, 2).reshape(B, T_, D).to(x.dtype)
            x = x + self.proj(y)
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return x

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, D)
            self.pos = nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(D)
            self.head = Linear(D, V, bias=False)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
                                 persistent=False)

        def forward(self, idx, targets):
            B, T_ = idx.shape
            x = self.tok(idx) + self.pos(torch.arange(T_, device=idx.device))
            for b in self.blocks:
                x = b(x, self.mask)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    def batch_for(step):
        """Synthetic, learnable data of this rank: affine walks mod V with 10 % noise."""
        g = torch.Generator().manual_seed(args.seed * 1000003 + step * 101 + rank)
        start = torch.randint(0, V, (args.batch, 1), generator=g)
        stride = torch.randint(1, 8, (args.batch, 1), generator=g)
        seq = (start + stride * torch.arange(T + 1).unsqueeze(0)) % V
        noise = torch.rand(seq.shape, generator=g) < 0.1
        seq = torch.where(noise, torch.randint(0, V, seq.shape, generator=g), seq)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    deepspeed.init_distributed(dist_backend="gloo")
    model = LM()  # built with the same seed on every rank, so all ranks start equal
    n_params = sum(p.numel() for p in model.parameters())
    largest = max(p.numel() for p in model.parameters())

    nvme = os.path.abspath(args.nvme_path)
    os.makedirs(nvme, exist_ok=True)
    aio, opt_extra, par_extra = ds_settings(args.ds_config)
    ds_config = {
        "train_batch_size": args.batch * world,
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
        "optimizer": {"type": "Adam",
                      "params": {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}},
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "offload_param": dict({"device": "nvme", "nvme_path": nvme, "pin_memory": False,
                                   "buffer_count": 5, "max_in_cpu": args.max_in_cpu,
                                   # elements; must hold the largest parameter
                                   "buffer_size": int(math.ceil(largest / 1e6) * 1e6)}, **par_extra),
            "offload_optimizer": dict({"device": "nvme", "nvme_path": nvme, "pin_memory": False,
                                       "buffer_count": 4, "fast_init": False}, **opt_extra),
            "sub_group_size": args.sub_group_size,
            "overlap_comm": False,
            "contiguous_gradients": True,
            # Release every gathered parameter right after use: with offload_param on nvme each
            # one in use holds one of the buffer_count swap buffers, and keeping them for reuse
            # runs out of buffers ("Not enough buffers 0 for swapping 1").
            "stage3_max_live_parameters": 0,
            "stage3_max_reuse_distance": 0,
            "stage3_prefetch_bucket_size": int(5e5),
            "stage3_param_persistence_threshold": int(1e4),
        },
        "aio": aio,
    }
    if args.ds_extra:
        merge(ds_config, json.loads(args.ds_extra))

    sampler = Sampler(args) if rank == 0 else None
    if rank == 0:
        print(f"[train_bench] torch {torch.__version__} deepspeed {deepspeed.__version__} ranks {world} "
              f"params {n_params} ({n_params / 1e6:.2f}M) threads {args.threads} nvme_path {nvme}", flush=True)
        print("[train_bench] ds_config " + json.dumps({"zero_optimization": ds_config["zero_optimization"],
                                                       "aio": ds_config["aio"]}), flush=True)
    samples = []
    if rank == 0:
        samples.append(sampler("before init"))
    t0 = time.perf_counter()
    engine, _opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    init_s = time.perf_counter() - t0
    swap = [counter.snapshot()]  # after init, then after each step
    dist.barrier()
    if rank == 0:
        print(f"[train_bench] deepspeed.initialize took {init_s:.2f}s", flush=True)

    losses, step_s, fwd_s, bwd_s, opt_s = [], [], [], [], []
    for step in range(1, args.steps + 1):
        x, y = batch_for(1)  # the same batch every step: the loss must fall
        if rank == 0:
            samples.append(sampler(f"before step {step}"))
        dist.barrier()
        a = time.perf_counter()
        loss = engine(x, y)
        b = time.perf_counter()
        engine.backward(loss)
        c = time.perf_counter()
        engine.step()
        d = time.perf_counter()
        dist.barrier()
        e = time.perf_counter()
        swap.append(counter.snapshot())
        lv = float(loss.detach().float().item())
        losses.append(lv)
        step_s.append(e - a)
        fwd_s.append(b - a)
        bwd_s.append(c - b)
        opt_s.append(d - c)
        if rank == 0 and step == args.self_test_corrupt_after:
            corrupt_master(nvme, rank)
        if rank == 0:
            rb = swap[-1][0] - swap[-2][0]
            wb = swap[-1][1] - swap[-2][1]
            print(f"step {step} loss {lv!r} time_s {e - a:.3f} fwd {b - a:.3f} bwd {c - b:.3f} opt {d - c:.3f} "
                  f"rank0 swap read {rb / 1e6:.0f} MB write {wb / 1e6:.0f} MB", flush=True)
    if rank == 0:
        samples.append(sampler("after last step"))

    # Forward-only loss on a batch never trained on: checks the parameters the last optimizer
    # step wrote, which no training loss saw.
    with torch.no_grad():
        x, y = batch_for(0)
        eval_loss = float(engine(x, y).detach().float().item())
    # Digest of the final parameters, gathered one at a time (a collective: every rank joins).
    h = hashlib.sha256()
    for name, p in engine.module.named_parameters():
        with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
            h.update(name.encode())
            h.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    digest = h.hexdigest()
    dist.barrier()
    census = swap_census(os.path.join(nvme, "zero_stage_3")) if rank == 0 else None
    out = {
        "rank": rank,
        "world_size": world,
        "losses": losses,
        "losses_repr": [repr(v) for v in losses],
        "eval_loss": eval_loss,
        "param_sha256": digest,
        "step_s": step_s, "fwd_s": fwd_s, "bwd_s": bwd_s, "opt_s": opt_s,
        "init_s": init_s,
        "swap": swap,  # [read bytes, write bytes, reads, writes] after init and after each step
    }
    if rank == 0:
        out.update({
            "samples": samples,
            "swap_files": census,
            "n_params": n_params,
            "nvme_path": nvme,
            "ds_config": ds_config,
            "versions": {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                         "python": sys.version.split()[0]},
            "args": vars(args),
        })
        print(f"eval loss {eval_loss!r}", flush=True)
        print(f"param sha256 {digest}", flush=True)
        print(f"swap files: {census['count']} *.tensor.swp, {census['bytes']} bytes", flush=True)
        if len(step_s) >= 3:
            print(f"[train_bench] median step (steps >= 3) {statistics.median(step_s[2:]):.3f}s", flush=True)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(out, f, indent=1)
    if counter.read_bytes == 0 or counter.write_bytes == 0:
        print(f"[train_bench] ERROR: rank {rank} saw no aio swap traffic (NVMe offload not active?)", flush=True)
        sys.exit(1)
    dist.barrier()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if os.environ.get("DSB_WORKER") == "1":
        worker(args)
        return 0
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
