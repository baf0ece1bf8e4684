"""Processes for pure work that one core cannot do fast enough (the rules' simulations in
``experiments.validity``): a pool of a forkserver's fresh processes, none of which inherits this
process's threads or anything a test patched. Here because ``launch/`` is the one room that
starts processes."""
from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def process_map(fn: Callable[[T], R], jobs: Iterable[T], workers: int) -> list[R]:
    """``[fn(j) for j in jobs]`` over ``workers`` fresh processes (``fn`` must be importable)."""
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
        return list(pool.map(fn, jobs))
