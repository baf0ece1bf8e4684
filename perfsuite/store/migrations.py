"""The migrations of stored formats: each turns a file of one version into the next, so that
``formats.check_format`` reads an old file as the current version (the versions' history is in
``formats``, beside ``VERSIONS``). Pure: nothing of perfsuite is imported here."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# The formats by name (``formats`` names them too; it reads this module, so this one reads none).
AB, BASELINE, DATASET, RESULT, RUN = ("perfsuite-ab", "perfsuite-baseline", "perfsuite-dataset",
                                      "perfsuite-result", "perfsuite-run")
#: A world's label: benchmark[transport-nN...] (``formats`` reads skips and failures by it).
LABEL = re.compile(r"^(?P<benchmark>[^\[]+)\[(?P<transport>.+?)-n(?P<world_size>\d+)(?:-.*)?\]$")

#: Allreduce transports timed on the host: before BASELINE 2 every one ran the mpi4py loop.
_V1_HOST_ALLREDUCE = ("mpi", "ring", "tf-grpc")


def _baseline_1_to_2(d: dict) -> dict:
    """Version 1 predates the native loop: its host allreduce entries were timed in Python."""
    for case, metrics in (d.get("cases") or {}).items():
        m = LABEL.match(str(case))
        if (m and m["benchmark"] == "allreduce" and m["transport"] in _V1_HOST_ALLREDUCE
                and isinstance(metrics, dict)):
            for entry in metrics.values():
                if isinstance(entry, dict):
                    entry.setdefault("timing", "python")
    return d


def _baseline_2_to_3(d: dict) -> dict:
    """Version 2 kept no sessions: every round of an entry came from the run that recorded it."""
    for metrics in (d.get("cases") or {}).values():
        for entry in (metrics.values() if isinstance(metrics, dict) else ()):
            if isinstance(entry, dict) and isinstance(entry.get("rounds"), list):
                entry.setdefault("sessions", [str(entry.get("recorded") or "v2")] * len(entry["rounds"]))
    return d


def _baseline_3_to_4(d: dict) -> dict:
    """Version 3 did not say which commit measured a session."""
    d.setdefault("recorded_at", {})
    return d


def _ab_1_to_2(d: dict) -> dict:
    """Version 1 stored each verdict's words; they are kept as the one fact it has."""
    for v in d.get("verdicts") or ():
        if isinstance(v, dict) and "note" in v:
            v.setdefault("facts", {"text": v.pop("note")})
            v.setdefault("reason", "")
    return d


def _ab_2_to_3(d: dict) -> dict:
    for arm in (d.get("arms") or {}).values():
        if isinstance(arm, dict):
            arm.setdefault("ref", None)
    return d


def _ab_3_to_4(d: dict) -> dict:
    d.setdefault("stop_on_regression", False)
    return d


def _ab_4_to_5(d: dict) -> dict:
    """Version 4 dropped invalid pairs unrecorded and did not mark its contended ones (None:
    not known which)."""
    d.setdefault("invalid", [])
    for metrics in (d.get("values") or {}).values():
        for entry in (metrics.values() if isinstance(metrics, dict) else ()):
            if isinstance(entry, dict):
                entry.setdefault("contended", None)
                entry.setdefault("invalid", [])
    return d


def _ab_5_to_6(d: dict) -> dict:
    """Before version 6 both arms ran every case: none was new or missing."""
    d.setdefault("new", [])
    d.setdefault("missing", [])
    return d


#: v1's names of OMB's avg/min/max of per-rank means -> v2's (RESULT 2, RUN 2).
_OMB_V1 = {"latency_us": "omb_avg_us", "latency_min_us": "omb_min_us", "latency_max_us": "omb_max_us"}


def _omb_names(sample: Any) -> None:
    """One v1 sample's info in v2's names. Only allreduce's info has the three OMB keys; its
    v2 ``latency_us`` is the p50 v1 stored as ``p50_us``."""
    info = sample.get("info") if isinstance(sample, dict) else None
    if isinstance(info, dict) and all(k in info for k in _OMB_V1) and "p50_us" in info:
        for old, new in _OMB_V1.items():
            info[new] = info.pop(old)
        info["latency_us"] = info["p50_us"]


def _result_1_to_2(d: dict) -> dict:
    for sample in d.get("samples") or ():
        _omb_names(sample)
    return d


def _run_1_to_2(d: dict) -> dict:
    """A stamped result migrates itself when read (``load_result``); the rest are v1 samples."""
    for r in d.get("results") or ():
        if isinstance(r, dict) and "format" not in r:
            _result_1_to_2(r)
    for p in d.get("partial") or ():
        for sample in (p.get("samples") or ()) if isinstance(p, dict) else ():
            _omb_names(sample)
    return d


def _dataset_1_to_2(d: dict) -> dict:
    """Version 1 wrote JPEG datasets only."""
    return {**d, "kind": "jpeg"}


#: (format, old version) -> function turning such a dict into the next version's.
MIGRATIONS: dict[tuple[str, int], Callable[[dict], dict]] = {
    (BASELINE, 1): _baseline_1_to_2, (BASELINE, 2): _baseline_2_to_3, (BASELINE, 3): _baseline_3_to_4, (AB, 1): _ab_1_to_2, (AB, 2): _ab_2_to_3,
    (AB, 3): _ab_3_to_4, (AB, 4): _ab_4_to_5, (AB, 5): _ab_5_to_6,
    (RESULT, 1): _result_1_to_2, (RUN, 1): _run_1_to_2, (DATASET, 1): _dataset_1_to_2}
