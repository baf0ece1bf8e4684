"""A plain DistributedDataParallel epoch, as a user writes and times it: the yardstick of the
``torch-epoch`` harness (the kernel runs ``ddp_epoch`` in the same world right after its own
timed epoch and reports the ratio), and a script to run alone:

    mpiexec -n 2 python -m perfsuite.kernels.plain.torch_ddp [gloo|nccl] [STEPS] [BATCH]

``ddp_epoch`` takes what any DDP script has (a wrapped model, an optimizer, a loss, a batch) and
returns the epoch's wall time: no per-step clock, no barrier, no gather. Standalone, the
group forms as the plain allreduce loop forms it (``torch_allreduce.form_group``), and the model
is small-cnn on synthetic 32 px images.
"""
from __future__ import annotations

import sys
import time


def ddp_epoch(model, optimizer, loss_fn, x, y, steps: int, done=lambda: None) -> float:
    """Seconds for ``steps`` training steps; ``done`` waits for the device (a GPU) at the end."""
    t0 = time.perf_counter()
    loss = None
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    if loss is not None:
        loss.item()
    done()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    import mpi4py

    mpi4py.rc.thread_level = "funneled"
    from mpi4py import MPI

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    backend = argv[0] if argv else "gloo"
    steps = int(argv[1]) if len(argv) > 1 else 20
    batch = int(argv[2]) if len(argv) > 2 else 32
    from .torch_allreduce import form_group

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    form_group(comm, dist, backend)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    torch.manual_seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 6 * 6, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.rand(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    done = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    ddp_epoch(ddp, optimizer, loss_fn, x, y, 3, done)  # warm-up
    seconds = ddp_epoch(ddp, optimizer, loss_fn, x, y, steps, done)
    slowest = comm.reduce(seconds, op=MPI.MAX, root=0)
    if rank == 0:
        print(f"{n * batch * steps / slowest:.1f} img/s ({n} workers, batch {batch}, {steps} steps, {backend})")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
