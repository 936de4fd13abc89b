#!/usr/bin/env python3
"""Tiny ZeRO-Infinity smoke training run: real DeepSpeed, CPU only, NVMe offload.

Trains a ~20M-parameter, 6-layer decoder-only transformer (built here, nothing is
downloaded) for a few steps with DeepSpeed ZeRO stage 3, bf16, and BOTH the
parameters and the optimizer state offloaded to `device: nvme` at --nvme-path.
Every swap goes through DeepSpeed's libaio path (O_DIRECT, 1 MiB requests), so
pointing --nvme-path into a tierfs mount exercises tierfs exactly as a real
ZeRO-Infinity job would.

Deterministic: fixed seeds, synthetic data derived from the step number,
torch.use_deterministic_algorithms(True), a fixed intra-op thread count and no
dropout. Two runs on the same machine must give bit-identical losses; smoke.sh
relies on that to compare a plain directory against a tierfs folder.

Single process, launched with plain `python` (no `deepspeed` launcher):
RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=<free port>.

Output (stdout):
    step 1 loss 6.9431357383728027 time_s 1.234
    ...
and a JSON file (--losses-out) with the losses, step times, a final eval loss,
a digest of the final parameters and the swap-file census.
"""

import argparse
import atexit
import glob
import hashlib
import json
import math
import os
import socket
import statistics
import sys
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nvme-path", required=True, help="DeepSpeed nvme_path (swap folder); created if missing")
    p.add_argument("--losses-out", required=True, help="JSON file to write losses/step times to")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (fixed for determinism; default 1)")
    p.add_argument("--batch", type=int, default=4, help="micro batch size (sequences)")
    p.add_argument("--seq", type=int, default=128, help="sequence length")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", choices=("fixed", "stream"), default="fixed",
                   help="fixed: every step trains on the same batch (loss must fall); "
                        "stream: a new synthetic batch per step")
    p.add_argument("--intra-op-parallelism", type=int, default=1, choices=(1, 2),
                   help="aio intra_op_parallelism (threads per swap)")
    p.add_argument("--self-test-corrupt-after", type=int, default=0, metavar="STEP",
                   help="harness self-test: after STEP, overwrite the first 4 KiB of the first fp32 "
                        "master-weight swap file with zeros (the comparison must then fail)")
    p.add_argument("--list-swap", action="store_true", help="list every *.tensor.swp file at the end")
    return p.parse_args()


def setup_env():
    # Must happen before deepspeed is imported.
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "tierfs", "torch_extensions"))
    os.environ["RANK"] = "0"
    os.environ["LOCAL_RANK"] = "0"
    os.environ["WORLD_SIZE"] = "1"
    os.environ["LOCAL_SIZE"] = "1"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    # Deterministic cuBLAS-style knobs are irrelevant on CPU, but keep Python hashing stable.
    os.environ.setdefault("PYTHONHASHSEED", "0")


def remove_allreduce_buffers():
    """DeepSpeed's CPU shared-memory all-reduce leaves a /dev/shm file per rank (~70 MB,
    named after the uid, address and port) when the process exits: remove this run's, or
    every smoke run (three per CI run) leaves its buffer behind."""
    pattern = "/dev/shm/deepspeed_allreduce_buffer_%d_%s_%s_*" % (
        os.getuid(), os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    for f in glob.glob(pattern):
        try:
            os.unlink(f)
        except OSError:
            pass


def swap_census(root):
    """Count and size DeepSpeed swap files (*.tensor.swp) under root, per folder."""
    per_dir = {}
    files = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for f in filenames:
            if f.endswith(".tensor.swp"):
                full = os.path.join(dirpath, f)
                size = os.stat(full).st_size
                files.append((os.path.relpath(full, root), size))
                rel = os.path.relpath(dirpath, root)
                c, b = per_dir.get(rel, (0, 0))
                per_dir[rel] = (c + 1, b + size)
    files.sort()
    return {
        "count": len(files),
        "bytes": sum(s for _, s in files),
        "per_dir": {d: {"count": c, "bytes": b} for d, (c, b) in sorted(per_dir.items())},
        "files": files,
    }


def corrupt_master(root):
    """Zero the first 4 KiB of the lowest-numbered fp32 master-weight swap file."""
    d = os.path.join(root, "zero_stage_3", "optimizer", "rank0")
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
    print(f"[train_tiny] SELF-TEST: zeroed the first 4 KiB of {victim}", flush=True)


def main():
    args = parse_args()
    setup_env()
    atexit.register(remove_allreduce_buffers)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import deepspeed

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    V, D, L, H, T = args.vocab, args.d_model, args.layers, args.heads, args.seq
    assert D % H == 0

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.qkv = nn.Linear(D, 3 * D)
            self.proj = nn.Linear(D, D)
            self.ln2 = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, 4 * D)
            self.fc2 = nn.Linear(4 * D, D)

        def forward(self, x, mask):
            B, T_, _ = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).split(D, dim=-1)
            q = q.view(B, T_, H, D // H).transpose(1, 2)
            k = k.view(B, T_, H, D // H).transpose(1, 2)
            v = v.view(B, T_, H, D // H).transpose(1, 2)
            # Plain attention (no fused SDPA kernel): deterministic everywhere.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
            att = att.masked_fill(mask[:T_, :T_], float("-inf"))
            att = torch.softmax(att.float(), dim=-1).to(v.dtype)
            y = (att @ v).transpose(1, 2).reshape(B, T_, D)
            x = x + self.proj(y)
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return x

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, D)
            self.pos = nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(D)
            self.head = nn.Linear(D, V, bias=False)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
                                 persistent=False)

        def forward(self, idx, targets):
            B, T_ = idx.shape
            pos = torch.arange(T_, device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for b in self.blocks:
                x = b(x, self.mask)
            logits = self.head(self.ln_f(x))
            # Loss in fp32 so its repr carries real precision (not bf16's 3 digits).
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    def batch_for(step):
        """Synthetic, learnable data: each sequence is an affine walk mod V."""
        g = torch.Generator().manual_seed(args.seed * 1000003 + step)
        start = torch.randint(0, V, (args.batch, 1), generator=g)
        stride = torch.randint(1, 8, (args.batch, 1), generator=g)
        seq = (start + stride * torch.arange(T + 1).unsqueeze(0)) % V
        noise = torch.rand(seq.shape, generator=g) < 0.1
        seq = torch.where(noise, torch.randint(0, V, seq.shape, generator=g), seq)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    model = TinyLM()
    n_params = sum(p.numel() for p in model.parameters())

    nvme = os.path.abspath(args.nvme_path)
    os.makedirs(nvme, exist_ok=True)

    ds_config = {
        "train_batch_size": args.batch,
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
        "optimizer": {
            "type": "Adam",
            "params": {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
        },
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "offload_param": {
                "device": "nvme",
                "nvme_path": nvme,
                "pin_memory": False,
                "buffer_count": 5,
                "buffer_size": int(2e6),  # elements; >= the largest parameter (1024x512 / 512x2048)
            },
            "offload_optimizer": {
                "device": "nvme",
                "nvme_path": nvme,
                "pin_memory": False,
                "buffer_count": 4,
                "fast_init": False,
            },
            "sub_group_size": int(1e6),
            "overlap_comm": False,
            "contiguous_gradients": True,
            "stage3_max_live_parameters": int(1e9),
            "stage3_max_reuse_distance": int(1e9),
            "stage3_prefetch_bucket_size": int(5e5),
            "stage3_param_persistence_threshold": int(1e4),
        },
        "aio": {
            "block_size": 1048576,
            "queue_depth": 8,
            "intra_op_parallelism": args.intra_op_parallelism,
            "single_submit": False,
            "overlap_events": True,
        },
    }

    print(f"[train_tiny] torch {torch.__version__} deepspeed {deepspeed.__version__} "
          f"params {n_params} ({n_params / 1e6:.2f}M) nvme_path {nvme} threads {args.threads} "
          f"MASTER_PORT {os.environ['MASTER_PORT']}", flush=True)

    t0 = time.perf_counter()
    engine, _opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                              config=ds_config)
    init_s = time.perf_counter() - t0
    print(f"[train_tiny] deepspeed.initialize took {init_s:.2f}s", flush=True)

    losses, times = [], []
    for step in range(1, args.steps + 1):
        x, y = batch_for(1 if args.data == "fixed" else step)
        t = time.perf_counter()
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        dt = time.perf_counter() - t
        lv = float(loss.detach().float().item())
        losses.append(lv)
        times.append(dt)
        print(f"step {step} loss {lv!r} time_s {dt:.3f}", flush=True)
        if step == args.self_test_corrupt_after:
            corrupt_master(nvme)

    # Forward-only loss on a held-out batch (number 0, never trained on): checks the
    # parameters written by the last optimizer step, which no training loss above saw.
    with torch.no_grad():
        x, y = batch_for(0)
        eval_loss = float(engine(x, y).detach().float().item())
    print(f"eval loss {eval_loss!r}", flush=True)

    # Digest of the final (bf16) parameters, gathered one at a time so the
    # parameter swapper never needs more than one buffer.
    h = hashlib.sha256()
    for name, p in engine.module.named_parameters():
        with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
            h.update(name.encode())
            h.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    digest = h.hexdigest()
    print(f"param sha256 {digest}", flush=True)

    census = swap_census(nvme)
    for d, v in census["per_dir"].items():
        print(f"swap dir {d}: {v['count']} files, {v['bytes']} bytes", flush=True)
    if args.list_swap:
        for f, s in census["files"]:
            print(f"swap file {f} {s}", flush=True)
    print(f"swap files: {census['count']} *.tensor.swp, {census['bytes']} bytes "
          f"({census['bytes'] / 2**20:.1f} MiB)", flush=True)
    print(f"median step time {statistics.median(times):.3f}s", flush=True)

    out = {
        "losses": losses,
        "losses_repr": [repr(v) for v in losses],
        "step_times_s": times,
        "median_step_time_s": statistics.median(times),
        "init_time_s": init_s,
        "eval_loss": eval_loss,
        "param_sha256": digest,
        "swap_files": {"count": census["count"], "bytes": census["bytes"], "per_dir": census["per_dir"]},
        "nvme_path": nvme,
        "n_params": n_params,
        "versions": {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                     "python": sys.version.split()[0]},
        "args": vars(args),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.losses_out)), exist_ok=True)
    with open(args.losses_out, "w") as f:
        json.dump(out, f, indent=2)

    try:
        import deepspeed.comm as dist
        dist.barrier()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception:
        pass


if __name__ == "__main__":
    main()
