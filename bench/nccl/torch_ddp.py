#!/usr/bin/env python3
"""DDP training over NCCL through the ferry plugin: 2 processes on one GPU.

Each process takes NCCL_HOSTID=host<rank> before NCCL starts, so NCCL sees two
hosts and every byte goes through the NET transport, i.e. the plugin named by
NCCL_NET_PLUGIN / NCCL_NET (the caller sets those and starts MPS; see
torch_ddp.sh). A 2-layer MLP trains 5 DDP steps with different data on each
rank; then the flattened parameters are all_gathered and must be

  * identical on all ranks (DDP kept the replicas in sync),
  * different from the initial ones (training did something),
  * equal, within float rounding, to a single-process reference trained on
    the union of all ranks' batches (the gradients really were averaged).

Rank 0 prints PASS or FAIL; the exit status is 0 only on PASS.
--backend gloo --device cpu runs the same checks without a GPU (no plugin).

--time-steps N then times N more DDP steps of a larger model (two H x H
layers, --time-hidden H, default 4096: 33.6 M parameters, 134 MB of
gradients, which DDP all-reduces in 25 MB buckets), after 3 untimed ones.
Each step also spends --host-ms of busy Python on the main thread, as a
training loop's data loading and bookkeeping do, so a data thread that takes
the main thread's core shows in the step time. Rank 0 prints the median and
the 10th and 90th percentile step times. --rank-cpus 0,1:2,3 binds each rank
to its own CPUs, as mpirun's --map-by slot:PE=2 does.
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5
BATCH = 16
IN_DIM, HIDDEN, OUT_DIM = 32, 64, 8
LR = 0.1


def make_model():
    torch.manual_seed(1234)  # Same start on every rank and for the reference.
    return torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT_DIM))


def batch(rank, step, device):
    g = torch.Generator().manual_seed(1000 * rank + step)  # Different per rank and step.
    x = torch.randn(BATCH, IN_DIM, generator=g)
    y = torch.randn(BATCH, OUT_DIM, generator=g)
    return x.to(device), y.to(device)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def sgd_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def reference(world, device):
    """One process, the union of every rank's batch: the gradient DDP must reproduce."""
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        xs, ys = zip(*(batch(r, step, device) for r in range(world)))
        sgd_step(model, opt, torch.cat(xs), torch.cat(ys))
    return flat(model)


def host_work(ms):
    """Busy Python for ms milliseconds: the main thread's own work in a training step."""
    end = time.perf_counter() + ms / 1000.0
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def timed_steps(rank, args, device):
    """args.time_steps DDP steps of an H x H MLP after 3 untimed: step times in ms."""
    h = args.time_hidden
    torch.manual_seed(99)
    model = torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.ReLU(),
                                torch.nn.Linear(h, h)).to(device)
    ddp = DDP(model, device_ids=[args.gpu] if args.device == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, h, generator=g).to(device)
    y = torch.randn(BATCH, h, generator=g).to(device)
    times = []
    for step in range(3 + args.time_steps):
        t0 = time.perf_counter()
        host_work(args.host_ms)
        sgd_step(ddp, opt, x, y)
        if args.device == "cuda":
            torch.cuda.synchronize(device)
        if step >= 3:
            times.append((time.perf_counter() - t0) * 1000.0)
    return times, sum(p.numel() for p in model.parameters())


def percentile(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def parse_cpus(text):
    """'0,1:2-3' -> [{0, 1}, {2, 3}]: each rank's CPUs, ranks separated by ':'."""
    ranks = []
    for part in text.split(":"):
        cpus = set()
        for item in part.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"bad CPU list '{part}' (want e.g. 0,1 or 0-3)")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        ranks.append(cpus)
    return ranks


def worker(rank, args, store):
    # Bound as mpirun --map-by slot:PE=N binds a rank, before CUDA and NCCL start threads.
    if args.rank_cpus:
        os.sched_setaffinity(0, args.rank_cpus[rank])
    # Before the first NCCL call: NCCL reads NCCL_HOSTID once, for its host hash.
    os.environ["NCCL_HOSTID"] = f"host{rank}"
    if args.device == "cuda":
        device = torch.device("cuda", args.gpu)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # Exact-enough float32 for the reference.
        extra = {"device_id": device}  # Eager init: the communicator is made here.
    else:
        device = torch.device("cpu")
        extra = {}
    dist.init_process_group(args.backend, init_method=f"file://{store}", rank=rank,
                            world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout), **extra)
    model = make_model().to(device)
    initial = flat(model).clone()
    ddp = DDP(model, device_ids=[args.gpu] if args.device == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step, device)
        sgd_step(ddp, opt, x, y)

    final = flat(model)
    gathered = [torch.empty_like(final) for _ in range(args.world)]
    dist.all_gather(gathered, final)
    same = all(torch.equal(gathered[0], g) for g in gathered[1:])
    moved = not torch.equal(final, initial)
    ref = reference(args.world, device)
    max_diff = (final - ref).abs().max().item()
    matches = torch.allclose(final, ref, rtol=1e-4, atol=1e-5)
    ok = same and moved and matches
    dist.barrier()
    times, nparams = timed_steps(rank, args, device) if ok and args.time_steps > 0 else ([], 0)
    if rank == 0:
        print(f"torch_ddp: torch {torch.__version__}, backend {args.backend}, "
              f"world {args.world}, {final.numel()} parameters, {STEPS} steps")
        if args.backend == "nccl":
            v = torch.cuda.nccl.version()  # A tuple in torch 2.x, an int in older ones.
            print(f"torch_ddp: NCCL {'.'.join(map(str, v)) if isinstance(v, tuple) else v}")
        print(f"torch_ddp: replicas identical: {same}; moved from init: {moved}; "
              f"matches single-process reference: {matches} (max |diff| {max_diff:.3g})")
        if times:
            t = sorted(times)
            print(f"torch_ddp: step time median {statistics.median(t):.2f} ms, p10 "
                  f"{percentile(t, 0.1):.2f}, p90 {percentile(t, 0.9):.2f}, over {len(t)} steps "
                  f"({nparams} parameters, {args.host_ms} ms of host work per step)")
        print("torch_ddp: PASS" if ok else "torch_ddp: FAIL", flush=True)
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--gpu", type=int, default=0, help="CUDA device every rank uses")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--timeout", type=int, default=120, help="collective timeout, seconds")
    p.add_argument("--time-steps", type=int, default=0,
                   help="after the checks, time this many steps of a larger model (0: none)")
    p.add_argument("--time-hidden", type=int, default=4096, help="width of the timed model")
    p.add_argument("--host-ms", type=float, default=2.0,
                   help="busy host work per timed step, milliseconds")
    p.add_argument("--rank-cpus", default="",
                   help="each rank's CPUs, ranks separated by ':' (e.g. 0,1:2,3); default: all")
    args = p.parse_args()
    if args.time_steps < 0 or args.time_hidden < 1 or args.host_ms < 0:
        p.error("--time-steps, --host-ms must be >= 0 and --time-hidden >= 1")
    try:
        args.rank_cpus = parse_cpus(args.rank_cpus) if args.rank_cpus else []
    except ValueError as e:
        p.error(str(e))
    if args.rank_cpus and len(args.rank_cpus) != args.world:
        p.error(f"--rank-cpus names {len(args.rank_cpus)} ranks, --world is {args.world}")
    if args.backend == "nccl" and not os.environ.get("NCCL_NET_PLUGIN"):
        print("torch_ddp: NCCL_NET_PLUGIN is not set; run it through torch_ddp.sh",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.spawn(worker, args=(args, os.path.join(tmp, "store")), nprocs=args.world,
                     join=True)
        except Exception as e:  # A rank failed or exited non-zero: mp.spawn says which.
            print(f"torch_ddp: FAIL ({type(e).__name__}: {e})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
