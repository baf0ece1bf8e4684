"""asv names perfsuite uses that are not asv's public API, each wrapped here once and pinned
by ``tests/test_asv_history.py::test_asv_private_names_behave_as_perfsuite_expects``, so an
asv release that changes one fails that test rather than a history read."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def ci_weight(result_stats: Mapping[str, Any] | None) -> float | None:
    """The weight asv's graphs give a point: 2 / width of its 99% CI (None when unknown)."""
    from asv._stats import get_weight

    return get_weight(result_stats)


def relayout_result(results: Any, key: str, params: list[list[str]], version: str) -> None:
    """Store one benchmark's result in asv's ``Results`` under other params and version, its
    values, samples and stats as they are. asv has no call for it: ``add_result`` recomputes
    the stats from samples, which ``asv run`` does not keep."""
    results._benchmark_params[key] = params
    results._benchmark_version[key] = version
