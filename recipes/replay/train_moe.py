"""A small job whose communication perfsuite captures and replays (docs/replay.md): a dense
block under DDP, a block sharded by FSDP2, and a mixture-of-experts layer whose tokens go to
the experts of their expert-parallel group (pairs of ranks) by an uneven all_to_all, the
experts' load skewed as a router's is (Zipf). Run it under torchrun, on gloo (CPU) or NCCL:

    torchrun --nproc-per-node 4 recipes/replay/train_moe.py            # 4 steps
    perfsuite capture -o trace --skip-calls 40 -- torchrun --nproc-per-node 4 recipes/replay/train_moe.py

With TRACE_DIR set it captures one step itself, with PyTorch's profiler (the five lines below
``if TRACE_DIR``), which is what to add to a training script of your own.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "4"))
TRACE_DIR = os.environ.get("TRACE_DIR")
HIDDEN, TOKENS = 256, 128

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
# Expert parallelism over pairs of ranks (the whole world where it has two or fewer).
pairs = [list(range(i, min(i + 2, world))) for i in range(0, world, 2)] if world > 2 else [list(range(world))]
groups = [dist.new_group(p) if len(pairs) > 1 else None for p in pairs]
expert_group = next(g for p, g in zip(pairs, groups) if rank in p)
expert_ranks = next(p for p in pairs if rank in p)

torch.manual_seed(0)
dense = DDP(nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN)).to(device))
sharded = nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.ReLU(), nn.Linear(2 * HIDDEN, HIDDEN)).to(device)
fully_shard(sharded)
expert = nn.Linear(HIDDEN, HIDDEN).to(device)
params = list(dense.parameters()) + list(sharded.parameters()) + list(expert.parameters())
opt = torch.optim.AdamW(params, lr=1e-3)
gen = torch.Generator().manual_seed(100 + rank)
popularity = torch.tensor([1.0 / (k + 1) for k in range(len(expert_ranks))])  # Zipf, s=1


def step() -> None:
    x = torch.randn(TOKENS, HIDDEN, generator=gen).to(device)
    h = sharded(dense(x))
    dest = torch.multinomial(popularity, TOKENS, replacement=True, generator=gen)  # the router
    order = dest.argsort()
    send_counts = torch.bincount(dest, minlength=len(expert_ranks)).to(device)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=expert_group)  # tokens each expert gets
    routed = torch.empty(int(recv_counts.sum()), HIDDEN, device=device)
    dist.all_to_all_single(routed, h[order].contiguous(), recv_counts.tolist(), send_counts.tolist(),
                           group=expert_group)
    back = torch.empty(TOKENS, HIDDEN, device=device)
    dist.all_to_all_single(back, expert(routed).detach(), send_counts.tolist(), recv_counts.tolist(),
                           group=expert_group)  # the experts' outputs return to their tokens
    loss = (back * h[order]).sum() + expert(routed).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


for _ in range(STEPS):
    step()
if TRACE_DIR:  # the five lines that capture one step of your own script
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if backend == "nccl" else [])],
                 record_shapes=True) as prof:
        step()
    prof.export_chrome_trace(os.path.join(TRACE_DIR, f"rank{rank}.json"))
dist.destroy_process_group()
