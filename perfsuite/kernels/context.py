"""What a kernel gets from the worker: the world, the job, and a way to report."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..records.model import Case, whole_number


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


def whole_option(options: dict, key: str, default: int | None, low: int, what: str) -> int | None:
    """A kernel knob that must be a whole number >= ``low``, checked the same way on every rank
    (so every rank raises together instead of one leaving the others in a collective)."""
    value = whole_number(options.get(key), what, low)
    return default if value is None else value
