"""What a kernel gets from the worker: the world, the job, and a way to report."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Case


@dataclass
class RankContext:
    comm: Any  # mpi4py communicator (COMM_WORLD)
    rank: int
    world_size: int
    transport: str
    cases: list[Case]
    options: dict[str, Any]
    emit: Callable[[dict], None]  # rank 0 only: one finished sample (Sample.to_dict())
    fault: Callable[[str, Case | None], None] = field(default=lambda point, case: None)

    @property
    def is_root(self) -> bool:
        return self.rank == 0
