"""A plain ``torch.distributed.all_reduce`` loop, the yardstick of the ``torch-gloo`` transport
(``perfsuite overhead --transports torch-gloo``), as the C program is the ``mpi`` transport's.

    mpiexec -n 2 python -m perfsuite.kernels.plain.torch_allreduce [BACKEND] SIZE:ITERS:WARMUP ...

The group forms as a user forms it from MPI (rank 0's store address over a broadcast); then per
size, in place, float32: warm-up calls, then ``ITERS`` calls each after an MPI barrier, each timed
by ``time.perf_counter``. Rank 0 prints one JSON line per size with the p50 over calls of the
slowest rank's time, as the kernel reports it. Nothing from perfsuite is imported. MPI starts at
the thread level perfsuite's ranks ask for (funneled: only the main thread calls MPI), so the
two loops differ in the loop alone; mpi4py's default, MPI_THREAD_MULTIPLE, slows MPICH's barrier.
"""
from __future__ import annotations

import json
import statistics
import sys
import time


def form_group(comm, dist, backend: str) -> None:
    """The process group as a user forms it inside an MPI world on one node: rank 0's TCPStore
    on a port of the kernel's choosing, its number broadcast over MPI."""
    rank, n = comm.Get_rank(), comm.Get_size()
    store = dist.TCPStore("127.0.0.1", 0, n, True, wait_for_workers=False) if rank == 0 else None
    port = comm.bcast(store.port if store else None, root=0)
    if rank:
        store = dist.TCPStore("127.0.0.1", port, n, False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=n)


def timed_calls(dist, barrier, t, iters: int) -> list[float]:
    """The loop itself: ``iters`` in-place all_reduce calls, each after a barrier, in seconds."""
    times = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str]) -> int:
    import mpi4py

    mpi4py.rc.thread_level = "funneled"
    from mpi4py import MPI

    import torch
    import torch.distributed as dist

    backend = argv[0] if argv and ":" not in argv[0] else "gloo"
    specs = [a for a in argv if ":" in a]
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    form_group(comm, dist, backend)
    for spec in specs:
        size, iters, warmup = (int(x) for x in spec.split(":"))
        t = torch.ones(max(size // 4, 1), dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(t)
        times = timed_calls(dist, comm.Barrier, t, iters)
        slowest = comm.reduce(times, op=lambda a, b, _t=None: [max(x, y) for x, y in zip(a, b)], root=0)
        if rank == 0:
            print(json.dumps({"size_bytes": size, "iters": iters,
                              "p50_us": statistics.median(slowest) * 1e6}), flush=True)
    comm.Barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
