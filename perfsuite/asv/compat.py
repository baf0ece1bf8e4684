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
