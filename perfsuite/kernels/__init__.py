"""Rank-local measurement kernels, behind one small interface.

A kernel is a module with ``run(ctx) -> dict``: it measures every case of its world, calls
``ctx.emit(sample_dict)`` once per finished case (rank 0 streams these so nothing is lost when
a later case fails), and returns extra facts for the result. Each benchmark's record
(``perfsuite/bench``) names its kernel module; a rank imports only that one, so an allreduce
world never imports TensorFlow.
"""
