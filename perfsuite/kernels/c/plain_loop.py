"""The C reference loop written plainly in Python with mpi4py (no perfsuite harness), so
`perfsuite overhead` can split the suite's cost over C into the binding's and the harness's.
Arguments and output as allreduce_loop.c: SIZE:ITERS:WARMUP ...; rank 0 prints JSON lines."""
import json
import sys
import time

import mpi4py
import numpy as np

mpi4py.rc.thread_level = "funneled"  # as the suite's worker and the C loop's MPI_Init
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
for arg in sys.argv[1:]:
    size, iters, warmup = (int(x) for x in arg.split(":"))
    s = (np.arange(size // 4) % 4 + rank + 1).astype(np.float32)
    r = np.empty_like(s)
    for _ in range(warmup):
        comm.Allreduce(s, r)
    t = np.empty(iters)
    for i in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(s, r)
        t[i] = time.perf_counter() - t0
    allt = comm.gather(t, root=0)
    if rank == 0:
        a = np.stack(allt)
        print(json.dumps({"size_bytes": size, "iters": iters,
                          "p50_us": float(np.median(a.max(axis=0)) * 1e6),
                          "latency_us": float(a.mean(axis=1).mean() * 1e6)}), flush=True)
