"""tinyproj's distributed benchmark, registered by its ``perfsuite.benchmarks`` entry point."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

import perfsuite
from tinyproj.work import normalise


@perfsuite.benchmark(world_sizes=[2], params={"rows": [64]}, max_time=0.2)
def normalise_rows(world, rows):
    """Normalises a block of rows on every rank, then sums its first column over the world."""
    x = np.random.default_rng(world.rank).random((rows, 640))
    total = np.zeros(1)

    def step():
        total[0] = normalise(x)[:, 0].sum()
        world.comm.Allreduce(MPI.IN_PLACE, total)

    return step
