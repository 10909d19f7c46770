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
"""
import argparse
import datetime
import os
import sys
import tempfile

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


def worker(rank, args, store):
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
    if rank == 0:
        print(f"torch_ddp: torch {torch.__version__}, backend {args.backend}, "
              f"world {args.world}, {final.numel()} parameters, {STEPS} steps")
        if args.backend == "nccl":
            v = torch.cuda.nccl.version()  # A tuple in torch 2.x, an int in older ones.
            print(f"torch_ddp: NCCL {'.'.join(map(str, v)) if isinstance(v, tuple) else v}")
        print(f"torch_ddp: replicas identical: {same}; moved from init: {moved}; "
              f"matches single-process reference: {matches} (max |diff| {max_diff:.3g})")
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
    args = p.parse_args()
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
