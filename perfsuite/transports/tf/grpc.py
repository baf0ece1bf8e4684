"""``tf-grpc``: an all-reduce through TensorFlow's collective ring over gRPC, for the allreduce kernel.

The same ring that ``MultiWorkerMirroredStrategy(CommunicationImplementation.RING)`` uses to
average gradients in the ``grpc`` training transport, called on one tensor of the kernel's
message size, so gRPC and MPI latency / busbw sit side by side in one table.

Buffers are TensorFlow tensors held in a small slot (TF tensors are immutable, so "receive into"
means the slot now holds the result). Filling and reading back happen outside the timed region;
the timed call is one ``tf.function`` that runs the collective, and on CPU it returns only when
the reduced tensor is complete, so no extra sync is needed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..base import AllreduceTransport
from .support import cluster_addresses, import_tf, multi_worker_strategy, set_tf_config


class TensorSlot:
    """A place for one TF tensor: what ``alloc`` returns and ``allreduce`` writes into."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any):
        self.tensor = tensor


class TfGrpcAllreduce(AllreduceTransport):
    name = "tf-grpc"
    implementation = "RING"
    contention_scope = "process"  # TensorFlow's collective executor threads make the call

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        rank = comm.Get_rank()
        self.addresses = cluster_addresses(comm, self.options)
        set_tf_config(self.addresses, rank)
        self.tf = tf = import_tf()
        # Collective ops must be configured before any other TF op runs: the strategy comes first.
        self.strategy = multi_worker_strategy(tf, self.implementation)
        strategy = self.strategy

        @tf.function
        def reduce_sum(t):
            # strategy.reduce of a per-replica value is a cross-worker collective all-reduce.
            # (ReplicaContext.all_reduce of a plain input tensor fails in TF 2.21 with
            # "destinations can not be empty".)
            per_replica = strategy.run(tf.identity, args=(t,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._reduce = reduce_sum

    def alloc(self, count: int, dtype: str) -> TensorSlot:
        return TensorSlot(self.tf.zeros([count], dtype=dtype))

    def fill(self, buf: TensorSlot, host_values: np.ndarray) -> None:
        buf.tensor = self.tf.constant(host_values)

    def to_host(self, buf: TensorSlot) -> np.ndarray:
        return buf.tensor.numpy()

    def allreduce(self, send: TensorSlot, recv: TensorSlot) -> None:
        recv.tensor = self._reduce(send.tensor)

    def describe(self) -> dict:
        return {"tensorflow": self.tf.__version__, "collective": f"MultiWorkerMirroredStrategy "
                f"{self.implementation} over gRPC", "workers": self.addresses}
