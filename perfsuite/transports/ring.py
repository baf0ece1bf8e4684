"""``ring``: Baidu's ring allreduce (baidu-research/baidu-allreduce) over MPI ``Sendrecv``.

The buffer is cut into ``n`` chunks. Reduce-scatter: in ``n-1`` steps each rank sends one chunk
to its right neighbour and adds the chunk from its left one, so rank ``r`` ends owning the full
sum of chunk ``(r+1) % n``. Allgather: ``n-1`` more steps pass the finished chunks around.
Each rank sends ``2(n-1)/n`` of the buffer, which is where busbw's factor comes from.

``ring_allreduce`` is written against an array module ``xp`` and two callables so the GPU
ring (device reductions, cached scratch) reuses the exact same schedule.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .base import AllreduceTransport


def chunk_bounds(count: int, n: int) -> list[tuple[int, int]]:
    """n contiguous chunks whose sizes differ by at most one element (some may be empty)."""
    base, extra = divmod(count, n)
    bounds, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(rank: int, n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(send chunk, recv chunk) per step, for reduce-scatter and then for allgather."""
    reduce_scatter = [((rank - s) % n, (rank - s - 1) % n) for s in range(n - 1)]
    allgather = [((rank + 1 - s) % n, (rank - s) % n) for s in range(n - 1)]
    return reduce_scatter, allgather


def ring_allreduce(buf, rank: int, n: int, scratch,
                   sendrecv: Callable[[object, object], None],
                   reduce_into: Callable[[object, object], None]) -> None:
    """In-place ring allreduce of ``buf``; ``scratch`` holds at least one chunk.

    ``sendrecv(send_view, recv_view)`` exchanges with the right/left neighbours;
    ``reduce_into(dst, src)`` does ``dst += src`` where the data lives.
    """
    if n == 1:
        return
    bounds = chunk_bounds(buf.shape[0], n)
    reduce_scatter, allgather = ring_schedule(rank, n)
    for send_i, recv_i in reduce_scatter:
        (s0, s1), (r0, r1) = bounds[send_i], bounds[recv_i]
        incoming = scratch[: r1 - r0]
        sendrecv(buf[s0:s1], incoming)
        reduce_into(buf[r0:r1], incoming)
    for send_i, recv_i in allgather:
        (s0, s1), (r0, r1) = bounds[send_i], bounds[recv_i]
        sendrecv(buf[s0:s1], buf[r0:r1])


class RingAllreduce(AllreduceTransport):
    name = "ring"
    _TAG = 7

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        self.right, self.left = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        self._scratch: dict[tuple[int, str], np.ndarray] = {}

    def _scratch_for(self, count: int, dtype) -> np.ndarray:
        key = (-(-count // self.n), str(dtype))  # one chunk, cached across calls
        if key not in self._scratch:
            self._scratch[key] = self.xp.empty(key[0], dtype=dtype)
        return self._scratch[key]

    def _sendrecv(self, send, recv) -> None:
        self.comm.Sendrecv(send, dest=self.right, sendtag=self._TAG,
                           recvbuf=recv, source=self.left, recvtag=self._TAG)

    @staticmethod
    def _reduce_into(dst, src) -> None:
        np.add(dst, src, out=dst)

    def reordered(self, comm) -> AllreduceTransport:
        return type(self)(comm, self.options)

    def allreduce(self, send, recv) -> None:
        if recv is not send:
            recv[...] = send
        ring_allreduce(recv, self.rank, self.n, self._scratch_for(recv.shape[0], recv.dtype),
                       self._sendrecv, self._reduce_into)
