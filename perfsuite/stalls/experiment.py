"""The five epochs of the Stash stall breakdown (``stalls.plan``), each a real training world (the
tf-epoch or torch-epoch benchmark, whichever the transport belongs to) run
through ``suite.run_one`` in its environment (emulated nodes for T4, a throttled disk for the
file runs), then the pure decomposition (``stalls.decompose``).

A run whose results were wrong is no evidence: its stalls are skipped, it is kept under the
breakdown's ``info["invalid"]`` (case, ranks, its step times), and the breakdown itself is
marked invalid (a failed world: nothing records it as a baseline). The other runs still run:
each measures its own part of the step."""
from __future__ import annotations

import datetime as _dt
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..store import fingerprint
from . import stash as stalls
from .. import suite, transports
from ..records.errors import ConfigError, LaunchError
from ..store.formats import SuiteRun, WorldOutcome
from ..kernels.training.input_files import list_images, list_tokens
from ..kernels.models.catalogue import model_spec
from ..launch import netns
from ..launch.commands import run_command
from ..records.model import Case, Result, Sample, WorldSpec

DROP_CACHES = ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"]
#: What each run's sample contributes to the breakdown's record.
RUN_FACTS = ("step_ms_p50", "params", "data", "prep_threads", "input_wait_ms_mean",
             "wire_bytes_sent", "wire_bytes_min", "emulated_network", "image_size", "seq_len", "steps",
             "peak_mem_MiB", "peak_mem_where")


@dataclass(frozen=True)
class StallConfig:
    """A breakdown to measure: the model and transport, N workers, the emulated network."""

    model: str
    transport: str = "mpi"
    world_size: int = 2
    batch: int = 16
    network: Any = None  # launch.netns.Shaping for T4; None: no network stall
    data_dir: str | None = None  # dataset (perfsuite.stalls.dataset): JPEGs, or token shards for a
    # language model; None: no prep/fetch stall
    prep_threads: int = 2
    options: dict[str, Any] = field(default_factory=dict)  # iters, warmup, image_size, ...
    disk: Any = None  # launch.diskio.DiskThrottle for the file runs (T2, T3); None: the real disk


@dataclass
class StallRunOutcome:
    breakdown: stalls.Breakdown
    sample: Sample
    outcomes: dict[str, WorldOutcome] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def suite_run(self) -> SuiteRun:
        """The breakdown as a results file holds it: one world of the ``stalls`` benchmark."""
        case = self.sample.case
        result = Result(case.benchmark, case.transport, case.world_size, (self.sample,),
                        fingerprint=fingerprint.collect())
        return SuiteRun([WorldOutcome(WorldSpec(case.benchmark, case.transport, case.world_size,
                                                (case,)), result)], result.fingerprint,
                        _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def stall_benchmark(model: str, transport: str, data: bool = True) -> str:
    """The training benchmark a breakdown of ``model`` on ``transport`` runs. A language model's
    file runs (``data``) need torch-epoch: only PyTorch's DataLoader reads token shards
    (``torch_input.TokenFeed``); tf-epoch trains one on synthetic tokens only."""
    benchmark = transports.training_benchmark(transport)
    if data and model_spec(model).is_lm and benchmark != "torch-epoch":
        raise ConfigError(f"{model} is a language model: its file runs read token shards on torch-epoch only; "
                          f"choose a PyTorch transport ({', '.join(transports.names('torch-epoch'))}), "
                          f"not {transport!r}, or --no-data")
    return benchmark


def _skip_reason(run: stalls.StallRun) -> str | None:
    """Why this machine cannot make one of the runs (the stalls that need it are skipped)."""
    if run.across_nodes:
        reason = netns.unavailable_reason(fingerprint.is_root())
        if reason:
            return reason
    if run.cache == "cold" and not fingerprint.is_root():
        return "not root (only root can drop the page cache for a cold run)"
    return None


def _prepare_cache(run: stalls.StallRun, sc: StallConfig) -> None:
    from .dataset import evict, warm

    if run.cache == "warm":
        warm(sc.data_dir)
    elif run.cache == "cold" and sc.disk is None:
        run_command(DROP_CACHES, timeout=120)
    elif run.cache == "cold":
        # On an emulated slow disk only the dataset goes cold: dropping every cache would make
        # the throttled ranks read TensorFlow's libraries through it too, and the fetch stall
        # would measure imports instead of the dataset.
        evict(sc.data_dir)


def run_stalls(sc: StallConfig, cfg: suite.SuiteConfig,
               on_run: Callable[[str, Any, WorldOutcome | None], None] | None = None) -> StallRunOutcome:
    """Measure the five epochs and decompose them. A run that cannot happen here (not root: no
    cold cache, no emulated network) is skipped with its reason, and so are its stalls."""
    if sc.disk is not None and sc.data_dir is not None:
        from ..launch.diskio import unavailable_reason as disk_reason

        if disk_reason(fingerprint.is_root()):
            raise LaunchError(f"--emulated-disk {sc.disk.label}: {disk_reason(fingerprint.is_root())}")
    benchmark = stall_benchmark(sc.model, sc.transport, sc.data_dir is not None)
    lm = model_spec(sc.model).is_lm
    if sc.data_dir is not None:  # the wrong kind of folder: one line now, not a failed world later
        (list_tokens if lm else list_images)(sc.data_dir)
    # One worker gets the same cores in every run (the CPU stand-in for one GPU per worker).
    threads = max(1, (os.cpu_count() or 1) // sc.world_size)
    base = {"baseline": False, "compute_threads": threads, "prep_threads": sc.prep_threads,
            "plain_ddp": False, **cfg.options, **sc.options}
    skipped: dict[str, str] = {}
    outcomes: dict[str, WorldOutcome] = {}
    times: dict[str, list[float]] = {}
    info: dict[str, Any] = {"compute_threads": threads, "framework": benchmark, "prep_threads": sc.prep_threads,
                            "emulated_disk": sc.disk.label if sc.disk is not None else None}
    invalid: dict[str, dict] = {}
    for run in stalls.plan(sc.world_size, data=sc.data_dir is not None, network=sc.network is not None,
                           files="token files" if lm else "JPEG files"):
        reason = _skip_reason(run)
        if reason:
            skipped[run.key] = reason
            continue
        options = dict(base)
        if run.data == "files":
            options.update(data="files", data_dir=sc.data_dir)
        _prepare_cache(run, sc)
        # T0 runs the same transport on one rank, so T1 - T0 is only what N workers add.
        case = Case(benchmark, sc.transport, run.world_size, model=sc.model, batch=sc.batch)
        (spec,) = suite.plan([case], options)
        # Both file runs read through the same throttled disk; the warm one never reaches it.
        disk = (sc.disk, sc.data_dir, run.key) if sc.disk is not None and run.data == "files" else None
        run_cfg = replace(cfg, network=sc.network if run.across_nodes else None, disk=disk)
        if on_run:
            on_run("start", run, None)
        outcome = suite.run_one(spec, run_cfg)
        outcomes[run.key] = outcome
        if on_run:
            on_run("done", run, outcome)
        sample = outcome.sample_for(case)
        if sample is not None and not sample.valid:
            invalid[run.key] = {"case": case.name, "ranks": sample.info.get("invalid_ranks"),
                                "reason": sample.info.get("invalid_reason"),
                                "step_ms": [t * 1e3 for t in sample.times_s]}
        if outcome.skipped or sample is None or not sample.valid:
            why = outcome.skipped or (str(outcome.failure) if outcome.failure else
                                      sample.info.get("invalid_reason", "its results were wrong") if sample
                                      else "no sample")
            skipped[run.key] = f"{run.key} did not measure: {why}"
            continue
        times[run.key] = [t * 1e3 for t in sample.times_s]
        info[f"{run.key}_info"] = {k: sample.info.get(k) for k in RUN_FACTS}
    if "T0" not in times:
        raise LaunchError(f"the stall breakdown needs T0 (1 worker, synthetic): {skipped.get('T0', 'not measured')}")
    bd = stalls.decompose(times, skipped)
    params = (info.get("T0_info") or {}).get("params")
    if sc.network is not None and params:
        info["gradient_bytes"] = 4 * int(params)
        info["network_stall_bound_ms"] = stalls.expected_network_stall_ms(
            4 * int(params), sc.world_size, sc.network.rate_bps)
    case = stalls.stall_case(sc.transport, sc.world_size, sc.model, sc.batch,
                             sc.network.label if sc.network is not None else None)
    info["skipped"] = skipped
    if invalid:
        info["invalid"] = invalid
    sample = stalls.to_sample(case, bd, info)
    return StallRunOutcome(bd, replace(sample, valid=not invalid), outcomes, skipped)


def ensure_data(spec, count: int, image: int, seq_len: int, data_dir: str | None = None) -> tuple[str, str]:
    """(folder, what it holds) of the files a stall run's ``count`` samples read: JPEGs for an
    image model, token shards of the model's own vocabulary and sequence length for a language
    model (the kernel checks both), made once and kept in ``data_dir`` (default: the temp folder,
    named by what it holds, so a later run reuses them)."""
    from . import dataset

    if spec.is_lm:
        want = dataset.TokenSpec(count=count, seq_len=seq_len, vocab=spec.classes)
        name = f"perfsuite-tokens-{count}x{seq_len}v{spec.classes}"
    else:
        px = max(image + image // 4, 16)  # stored a little larger: the pipeline resizes
        want, name = dataset.DatasetSpec(count=count, image_px=px), f"perfsuite-jpeg-{count}x{px}"
    folder = data_dir or os.path.join(tempfile.gettempdir(), name)
    m = dataset.ensure_dataset(folder, want)
    return folder, f"{dataset.describe(m)}, {m['bytes'] / 1e6:.2f} MB"
