"""The collective kernels: every collective of ``perfsuite.collectives`` timed with OMB and
nccl-tests semantics (``allreduce.py``, its buffers in ``buffers.py``), point-to-point between
nodes (``p2p.py``), a transport beside its framework's plain loop (``yardstick.py``) and the check
that an injected slowdown is what it says (``injection.py``)."""
