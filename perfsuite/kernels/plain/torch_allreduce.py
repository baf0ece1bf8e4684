"""A plain torch.distributed loop of one collective's call, the yardstick of the ``torch-gloo``
transport (``perfsuite overhead --transports torch-gloo``), as the C program is the ``mpi``
transport's.

    mpiexec -n 2 python -m perfsuite.kernels.plain.torch_allreduce [BACKEND] SIZE:ITERS:WARMUP ...
        [--collective NAME] [--dtype DTYPE] [--op OP] [--root R] [--out-of-place]

The group forms as a user forms it from MPI (rank 0's store address over a broadcast); then per
size: warm-up calls, then ``ITERS`` calls each after an MPI barrier, each timed by
``time.perf_counter``. Rank 0 prints one JSON line per size with the p50 over calls of the
slowest rank's time, as the kernel reports it. Nothing from perfsuite is imported. MPI starts at
the thread level perfsuite's ranks ask for (funneled: only the main thread calls MPI), so the
two loops differ in the loop alone; mpi4py's default, MPI_THREAD_MULTIPLE, slows MPICH's barrier.

The call is torch's own for the collective (``all_reduce``, ``all_gather_single`` where torch has
it, else ``all_gather_into_tensor``, ``reduce_scatter_single`` or ``reduce_scatter_tensor``,
``all_to_all_single``, ``broadcast``, ``reduce``), on buffers laid out as nccl-tests lays them
(the element count rounded down to a multiple of the world size; all_gather in place sends the
slice of its output at rank x c/n). In place by default (allreduce, all_gather, broadcast,
reduce), as users call them; alltoall and reduce_scatter have no in-place form and run out of
place. Out of place, allreduce and reduce copy send into recv first, inside the timed call, as
the transport does. The default, allreduce of float32 in place with sum, is the loop as it was.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce")
OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
#: No in-place form: NCCL has none for alltoall; MPI and NCCL place reduce_scatter's apart.
OUT_OF_PLACE_ONLY = ("alltoall", "reduce_scatter")


def form_group(comm, dist, backend: str) -> None:
    """The process group as a user forms it inside an MPI world on one node: rank 0's TCPStore
    on a port of the kernel's choosing, its number broadcast over MPI."""
    rank, n = comm.Get_rank(), comm.Get_size()
    store = dist.TCPStore("127.0.0.1", 0, n, True, wait_for_workers=False) if rank == 0 else None
    port = comm.bcast(store.port if store else None, root=0)
    if rank:
        store = dist.TCPStore("127.0.0.1", port, n, False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=n)


def plain_call(dist, collective: str, send, recv, op: str = "sum", root: int = 0):
    """One call of ``collective`` as torch's own function with its arguments bound (a
    ``functools.partial``: no Python frame of ours between the loop and torch), and the copy
    an out-of-place allreduce or reduce makes first (None in place)."""
    rop = getattr(dist.ReduceOp, OPS[op])
    copy = functools.partial(recv.copy_, send) if recv is not send else None
    if collective == "allreduce":
        return functools.partial(dist.all_reduce, recv, op=rop), copy
    if collective == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return functools.partial(gather, recv, send), None
    if collective == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return functools.partial(scatter, recv, send, op=rop), None
    if collective == "alltoall":
        return functools.partial(dist.all_to_all_single, recv, send), None
    if collective == "broadcast":
        return functools.partial(dist.broadcast, recv, src=root), None
    if collective == "reduce":
        return functools.partial(dist.reduce, recv, dst=root, op=rop), copy
    raise ValueError(f"collective {collective!r} is not one of {', '.join(COLLECTIVES)}")


def timed_calls(dist, barrier, t, iters: int, recv=None, collective: str = "allreduce",
                op: str = "sum", root: int = 0) -> list[float]:
    """The loop itself: ``iters`` calls, each after a barrier, in seconds. ``t`` is the send
    buffer and ``recv`` the receive buffer (None: ``t``, in place); the default is the in-place
    sum all_reduce of ``t``."""
    call, copy = plain_call(dist, collective, t, t if recv is None else recv, op, root)
    clock = time.perf_counter
    times = []
    if copy is None:
        for _ in range(iters):
            barrier()
            t0 = clock()
            call()
            times.append(clock() - t0)
    else:
        for _ in range(iters):
            barrier()
            t0 = clock()
            copy()
            call()
            times.append(clock() - t0)
    return times


def buffers(torch, collective: str, size: int, dtype, rank: int, n: int, inplace: bool):
    """(send, recv) of one rank for a case of ``size`` bytes, laid out as nccl-tests lays them:
    the count rounded down to a multiple of ``n`` where the collective splits it (at least one
    element per rank); ones, so a product or a sum stays finite for a while."""
    count = max(size // torch.tensor([], dtype=dtype).element_size(), 1)
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        count = max(count // n, 1) * n
    if collective == "all_gather":
        recv = torch.ones(count, dtype=dtype)
        chunk = count // n
        return (recv[rank * chunk:(rank + 1) * chunk] if inplace else torch.ones(chunk, dtype=dtype)), recv
    if collective == "reduce_scatter":
        return torch.ones(count, dtype=dtype), torch.ones(count // n, dtype=dtype)
    send = torch.ones(count, dtype=dtype)
    return send, (send if inplace or collective == "broadcast" else torch.ones(count, dtype=dtype))


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m perfsuite.kernels.plain.torch_allreduce",
                                description="A plain torch.distributed loop of one collective.")
    p.add_argument("args", nargs="*", metavar="[BACKEND] SIZE:ITERS:WARMUP")
    p.add_argument("--collective", default="allreduce", choices=COLLECTIVES)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--op", default="sum", choices=tuple(OPS))
    p.add_argument("--root", type=int, default=0)
    p.add_argument("--out-of-place", action="store_true")
    a = p.parse_args(argv)
    a.backend = a.args[0] if a.args and ":" not in a.args[0] else "gloo"
    a.specs = [x for x in a.args if ":" in x]
    return a


def main(argv: list[str]) -> int:
    import mpi4py

    mpi4py.rc.thread_level = "funneled"
    from mpi4py import MPI

    import torch
    import torch.distributed as dist

    a = parse(argv)
    inplace = not a.out_of_place and a.collective not in OUT_OF_PLACE_ONLY
    dtype = getattr(torch, a.dtype)
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    form_group(comm, dist, a.backend)
    for spec in a.specs:
        size, iters, warmup = (int(x) for x in spec.split(":"))
        send, recv = buffers(torch, a.collective, size, dtype, rank, n, inplace)
        call, copy = plain_call(dist, a.collective, send, recv, a.op, a.root)
        for _ in range(warmup):
            if copy is not None:
                copy()
            call()
        times = timed_calls(dist, comm.Barrier, send, iters, recv, a.collective, a.op, a.root)
        slowest = comm.reduce(times, op=lambda x, y, _t=None: [max(p, q) for p, q in zip(x, y)], root=0)
        if rank == 0:
            print(json.dumps({"size_bytes": size, "iters": iters,
                              "p50_us": statistics.median(slowest) * 1e6, "collective": a.collective,
                              "dtype": a.dtype, "op": a.op, "inplace": inplace}), flush=True)
    comm.Barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
