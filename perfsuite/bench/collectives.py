"""all_gather, reduce_scatter, alltoall, broadcast and reduce: one benchmark each, as allreduce
is, built from each collective's record (``perfsuite/collectives/<name>.py``, nccl-tests' one
file per collective). The records sit below the kernels (the ranks read them); everything a
benchmark adds to a record, cases to tables, is allreduce's (``allreduce.collective_spec``)."""
from __future__ import annotations

from .. import collectives
from . import register
from .allreduce import collective_spec

SPECS = tuple(register(collective_spec(collectives.get(name))) for name in collectives.NAMES[1:])
