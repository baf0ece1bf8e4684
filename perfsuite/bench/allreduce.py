"""allreduce: latency and bus bandwidth per transport, world size, message size, dtype and op.

The kernel (``perfsuite.kernels.collectives.allreduce``) has OSU and nccl-tests semantics; this record says
how its cases are chosen (sizes x dtypes x ops inside one world per transport and world size),
how a world's results are tabled (nccl-tests columns, and OSU's layout on request), how they
land in asv, and how many bytes its calls must put on the wires between emulated nodes. The
other collectives (``bench/collectives.py``) share all of it through their records
(``perfsuite.collectives``): only the record differs.
"""
from __future__ import annotations

from collections.abc import Sequence

from .. import collectives
from .asv_view import STRAGGLER, AsvLayout, AsvMetric, AxisAdded, MeasuredAxis
from ..collectives import Collective
from ..records.errors import ConfigError
from ..records import memory
from ..records.model import DTYPE_ALIASES, DTYPES, Case, Opt, Result, Sample, Tolerance, format_size, parse_names, parse_size, split_list, timing_of
from . import BenchmarkSpec, Selection, heading, register

DEFAULT_SIZES = "4:64MiB"
DEFAULT_SIZE_FACTOR = 4  # 4 B .. 64 MiB by x4 is 13 sizes, a 2-rank sweep that fits in seconds
DEFAULT_DTYPE = "float32"


def parse_sizes(text: str, dtype: str | None = DEFAULT_DTYPE) -> tuple[int, ...]:
    """Sizes as '4,1024,1048576', a range '4:64MiB' (x4 steps) or '4:64MiB:2' (factor 2); with
    ``dtype``, each must be a whole number of its elements."""
    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is unknown; choose from {', '.join(DTYPES)}")
    sizes: list[int] = []
    for part in split_list(text, "sizes", "4,1024,1MiB"):
        if ":" in part:
            bits = part.split(":")
            if len(bits) not in (2, 3):
                raise ConfigError(f"size range {part!r} must be MIN:MAX or MIN:MAX:FACTOR, e.g. 4:64MiB")
            lo, hi = parse_size(bits[0]), parse_size(bits[1])
            factor = DEFAULT_SIZE_FACTOR
            if len(bits) == 3:
                if not bits[2].strip().isdigit() or int(bits[2]) < 2:
                    raise ConfigError(f"size factor {bits[2]!r} in {part!r} must be a whole number >= 2")
                factor = int(bits[2])
            if lo < 1 or hi < lo:
                raise ConfigError(f"size range {part!r} needs 1 <= MIN <= MAX")
            s = lo
            while s <= hi:
                sizes.append(s)
                s *= factor
        else:
            sizes.append(parse_size(part))
    if not sizes:
        raise ConfigError(f"sizes {text!r} name no size; use e.g. 4,1024 or 4:64MiB")
    for s in sizes:
        check_size(s, dtype)
    return tuple(dict.fromkeys(sizes))  # keep order, drop repeats


def check_size(size: int, dtype: str | None) -> None:
    itemsize = DTYPES[dtype] if dtype is not None else 1
    if size <= 0:
        raise ConfigError(f"size {size} is not allowed; sizes must be >= {itemsize} bytes")
    if size % itemsize:
        raise ConfigError(f"size {size} is not a multiple of {itemsize} bytes ({dtype}); "
                          f"use a multiple such as {max(itemsize, size - size % itemsize)}")


def parse_dtypes(text: str | Sequence[str]) -> tuple[str, ...]:
    """Checked dtype names; nccl-tests' and torch's names of the fp8 types become ours, so a
    case is named one way whichever name asked for it."""
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    names = [DTYPE_ALIASES.get(p, p) for p in parts]
    return parse_names(",".join(names) if isinstance(text, str) else names, DTYPES, "dtype")


def parse_ops(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, collectives.OPS, "op")


def parse_splits(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, collectives.SPLITS, "splits")


def parse_root(text) -> int:
    value = str(text).strip()
    if not value.isdigit():
        raise ConfigError(f"root {text!r} must be a rank: a whole number >= 0, e.g. 0")
    return int(value)


def allreduce_cases(transports: Sequence[str], world_sizes: Sequence[int],
                    sizes: Sequence[int], dtypes: Sequence[str] = (DEFAULT_DTYPE,),
                    ops: Sequence[str] = ("sum",), root: int = 0, benchmark: str = "allreduce",
                    splits: Sequence[str] = (collectives.DEFAULT_SPLITS,)) -> list[Case]:
    """transport x world size x dtype x op x splits x size, in the order worlds run (sizes
    innermost); ops only for a collective that reduces, the root only for one that has a root,
    split distributions only for an irregular one (alltoallv)."""
    coll = collectives.get(benchmark)
    for dt in dtypes:
        for s in sizes:
            check_size(s, dt)
    ops = tuple(ops) if coll.reduces else ("sum",)
    root = root if coll.rooted else 0
    splits = tuple(splits) if coll.splits is not None else (collectives.DEFAULT_SPLITS,)
    for n in world_sizes:
        if root >= n:
            raise ConfigError(f"root {root} is not a rank of world size {n}; give --root 0..{n - 1}")
    return [Case(benchmark, t, n, size_bytes=s, dtype=dt, variant=collectives.variant(op, root, sp))
            for t in transports for n in world_sizes for dt in dtypes for op in ops for sp in splits
            for s in sizes]


def cases(sel: Selection) -> list[Case]:
    v = sel.values
    return [c for t in sel.transports or ()
            for c in allreduce_cases((t,), sel.world_sizes_of(t), v.get("sizes") or parse_sizes(DEFAULT_SIZES),
                                     v.get("dtypes") or (DEFAULT_DTYPE,), v.get("ops") or ("sum",),
                                     int(v.get("root") or 0), sel.benchmark,
                                     v.get("splits") or (collectives.DEFAULT_SPLITS,))]


def allreduce_wire_bytes(size_bytes: int, world_size: int, calls: int, benchmark: str = "allreduce") -> int:
    """The least bytes ``calls`` calls of ``size_bytes`` put on the wires, summed over ranks,
    when every rank is on its own node: an allreduce's ranks each send 2(n-1)/n of the buffer
    (the bandwidth-optimal bound; recursive doubling sends more), so n ranks send 2(n-1) x size;
    the other collectives (n-1) x size (``Collective.wire``)."""
    return collectives.get(benchmark).wire_bytes(size_bytes, world_size, calls)


def wire_bytes(sample: Sample) -> int:
    i = sample.info
    return allreduce_wire_bytes(int(i.get("size_bytes", sample.case.size_bytes or 0)), sample.case.world_size,
                                int(i.get("iters", 0)) + int(i.get("warmup", 0)), _collective(sample.case.benchmark).name)


def _collective(benchmark: str) -> Collective:
    return collectives.find(benchmark) or collectives.get("allreduce")


COLUMNS = ("size", "count", "type", "redop", "time(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)",
           "valid")
#: What the time columns are. nccl-tests prints time, algbw and busbw of one statistic per size;
#: here it is the judged one (``latency_us``). OMB's avg/min/max of per-rank means are another
#: statistic (a mean keeps the slow calls a p50 drops), so they are a layout of their own.
STATISTIC_LINE = ("# time, p99: per call the slowest rank's time, p50 and p99 over calls; algbw = size / time, "
                  "busbw = algbw x 2(n-1)/n; OMB's per-rank means: perfsuite report FILE --print omb")


def statistic_line(benchmark: str) -> str:
    return STATISTIC_LINE.replace("2(n-1)/n", _collective(benchmark).factor_words)


def table(result: Result) -> str:
    """nccl-tests-like columns: time, algbw and busbw from one statistic (``STATISTIC_LINE``);
    a rooted collective's root beside its redop, as nccl-tests prints it."""
    extra = result.extra or {}
    head = heading(result, "in-place" if extra.get("inplace") else "out-of-place")
    # Device transports add busbw as a fraction of the device's measured copy bandwidth.
    of_copy = any("busbw_of_copy" in s.info for s in result.samples)
    rooted = any("root" in s.info for s in result.samples)
    split = any("splits" in s.info for s in result.samples)  # alltoallv's distribution
    # What each rank holds: the case's buffers as the record lays them out, and its measured peak.
    held = any("buffer_bytes" in s.info for s in result.samples)
    peak = any(memory.METRIC in s.info for s in result.samples)
    columns = (COLUMNS[:4] + (("root",) if rooted else ()) + (("splits",) if split else ()) + COLUMNS[4:] + (("busbw/copy",) if of_copy else ())
               + (("buffers(B)",) if held else ()) + (("peak(MiB)",) if peak else ()))
    lines = [head, "#" + "".join(f"{c:>13}" for c in columns)[1:]]
    for s in result.samples:
        i = s.info
        lines.append(
            f"{i['size_bytes']:>12} {i['count']:>12} {i['dtype']:>12} {i['op']:>12} "
            + (f"{i.get('root', 0):>12} " if rooted else "")
            + (f"{i.get('splits', collectives.DEFAULT_SPLITS):>12} " if split else "")
            + f"{i['latency_us']:>12.2f} {i['p99_us']:>12.2f} {i['algbw_GBps']:>12.3f} "
            f"{i['busbw_GBps']:>12.3f} {'OK' if s.valid else 'WRONG':>12}"
            + (f" {i.get('busbw_of_copy', float('nan')):>12.3f}" if of_copy else "")
            + (f" {i.get('buffer_bytes', '-'):>12}" if held else "")
            + (f" {i.get(memory.METRIC, float('nan')):>12.1f}" if peak else ""))
    lines.append(statistic_line(result.benchmark))
    if split:
        lines.append("# size: the most bytes any rank sends or receives (nccl-tests' alltoallv; the case's "
                     "name has what each rank sends); count: each rank's total / n")
    if held or peak:
        where = next((s.info.get("buffer_where") for s in result.samples if s.info.get("buffer_where")), "host")
        peak_where = next((s.info.get("peak_mem_where") for s in result.samples if s.info.get("peak_mem_where")), "host")
        lines.append(f"# buffers: bytes each rank allocated for the case ({where} memory: send and receive "
                     "buffers, or one in place, times the copies a batch rotates through); peak: the largest "
                     "rank's " + ("figure from its GPU's allocator (torch's peak; CuPy's pool: what it holds "
                                  "at the end)" if peak_where == "device" else "resident memory over the timed calls"))
    first = result.samples[0].info if result.samples else {}
    line = timing_line(first, {timing_of(s.info) for s in result.samples})
    note = (extra.get("transport_facts") or {}).get("native_note")
    if line:
        lines.append(f"{line}; {note}" if note else line)
    if result.world_size == 1:
        lines.append("# busbw is 0 at world size 1, as in nccl-tests: no byte crosses a bus; "
                     "latency and algbw time the call itself")
    device_copy = extra.get("device_copy_GBps")
    if device_copy:
        lines.append(f"# device copy bandwidth {device_copy:.2f} GB/s (D2D on a GPU, measured in "
                     "this world); busbw/copy is busbw as a fraction of it")
    copy = extra.get("host_copy_GBps")
    last = result.samples[-1].info if result.samples else {}
    if copy and last.get("size_bytes", 0) >= 1 << 20 and result.world_size > 1:  # a ceiling only means something for large messages
        lines.append(f"# host memory-copy bandwidth {copy:.2f} GB/s; busbw at "
                     f"{format_size(last['size_bytes'])} is {last['busbw_GBps'] / copy:.2f} of it")
    return "\n".join(lines)


def timing_line(first: dict, timings: set[str]) -> str:
    """Which loop or clock timed the calls, and why not the native loop where it was wanted."""
    timing = timing_of(first)
    if first.get("clock", "host") != "host" or timing not in ("python", "native", ""):
        line = (f"# timed by {first.get('clock', 'host')}, {first.get('timing')}: "
                f"{first.get('calls_per_sample', 1)} call(s) per sample, its mean per call")
        if timing == "native-batch":
            return line + " (the batch issued by a C loop between the events)"
        why = first.get("timing_why")
        return f"{line}; not native-batch: {why}" if why else line
    if not timing:
        return ""
    if timings == {"native"}:
        return "# timing: native (each barrier-separated call timed by a C loop, not by Python)"
    why = first.get("timing_why")
    head = "# timing: python (each barrier-separated call timed by the kernel's Python loop)"
    if "native" in timings:  # sizes too big for MPI's int count fall back one by one
        return ("# timing: native (each barrier-separated call timed by a C loop), but sizes over "
                "2^31 elements by the mpi4py loop (MPI's count is an int)")
    return f"{head}; not native: {why}" if why else head


def omb_table(result: Result) -> str:
    """The OSU Micro-Benchmarks layout of the collective's own benchmark (osu_allreduce,
    osu_allgather, ...), so numbers diff against OMB runs directly: OMB's size is its message
    size (``Collective.omb``: one rank's part for allgather, one peer's for alltoall)."""
    coll = _collective(result.benchmark)
    lines = [f"# {coll.omb_title} (perfsuite, transport={result.transport})",
             f"# world_size={result.world_size}  Datatype: "
             f"{result.samples[0].case.dtype if result.samples else DEFAULT_DTYPE}",
             f"# {'Size':<10}{'Avg Latency(us)':>18}{'Min Latency(us)':>18}"
             f"{'Max Latency(us)':>18}{'Iterations':>12}"]
    for s in result.samples:
        i = s.info
        lines.append(f"{i.get('omb_size_bytes', i['size_bytes']):<12}{i['omb_avg_us']:>18.2f}{i['omb_min_us']:>18.2f}"
                     f"{i['omb_max_us']:>18.2f}{i['iters']:>12}")
    return "\n".join(lines)


#: The report's page has no footnote under a table, so its header says the statistic.
REPORT_COLUMNS = ("size", "time p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "valid")


def report_rows(result: Result) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The report's table of one world: nccl-tests' words, fewer columns than the text table."""
    return REPORT_COLUMNS, [
        (format_size(s.info["size_bytes"]), f"{s.info['latency_us']:.2f}", f"{s.info['p99_us']:.2f}",
         f"{s.info['algbw_GBps']:.3f}", f"{s.info['busbw_GBps']:.3f}",
         "OK" if s.valid else "WRONG") for s in result.samples]


#: Latency and busbw get 3%, other metrics the generic 5% (docs/baselines.md, "Tolerance"); a
#: verdict widens either to what the baseline's own rounds can resolve (regress.noise_tolerance).
TOLERANCES = {"busbw_GBps": Tolerance(-0.03, 0.03), "latency_us": Tolerance(-0.03, 0.03)}
SHORT_NAMES = {"busbw_GBps": "busbw", "algbw_GBps": "algbw", "latency_us": "latency"}


def parse_device_timing(text: str) -> str:
    from ..transports.gpu import DEVICE_TIMINGS

    if text not in DEVICE_TIMINGS:
        raise ConfigError(f"device timing {text!r} is unknown; choose from {', '.join(DEVICE_TIMINGS)}")
    return text


#: How host transports' calls are timed (option ``host_timing``); only ``mpi`` has a native loop.
HOST_TIMINGS = ("auto", "native", "python")


def parse_host_timing(text: str) -> str:
    if text not in HOST_TIMINGS:
        raise ConfigError(f"host timing {text!r} is unknown; choose from {', '.join(HOST_TIMINGS)}")
    return text


def _asv_values(case: Case) -> tuple:
    return (case.transport, case.world_size, format_size(case.size_bytes or 0), case.dtype)


def _timings(case: Case) -> tuple:
    """The timings a case may be measured with: its loops on the host, or a device timing."""
    from ..transports import REGISTRY
    from ..transports.base import TIMINGS

    spec = REGISTRY.get(case.transport)
    if spec is not None and spec.device != "host":
        return TIMINGS
    return ("native", "python") if spec is not None and spec.native else ("python",)


def _asv_timing(info: dict) -> str:
    """Samples from before timings were recorded: host loops were Python's, devices per call."""
    return timing_of(info) or ("python" if info.get("clock", "host") == "host" else "per-call")


def _op_of(info: dict) -> str:
    return str(info.get("op", "sum"))


#: The op as allreduce's last axis: a measured axis (read from the sample, one choice per
#: case), so version 4's points read as "sum" on it (``AxisAdded``).
OP_AXIS = MeasuredAxis(_op_of, lambda case: (collectives.op_root(case.variant)[0],))


# Version 2 adds the timing axis: the native and the mpi4py loop draw separate lines, so a
# fallback from one to the other is never read as a step. Version 3: asv's samples are one value
# per round, no longer per iteration (perfsuite.bench.asv_view.round_samples); asv never pools or
# compares them with version 2's. Version 4 adds the straggler axis (a world with a late rank
# draws its own line); version 3's points read as "none" on it. Version 5 adds the op axis
# (allreduce with max is another line than with sum); version 4's points read as "sum".
# Peak memory per rank (the largest rank's, MiB) is a series of its own beside time, recorded
# not judged: a collective's buffers are its record's, so its memory moves with the library.
METRICS = (AsvMetric("track_latency", "latency_us", "seconds", scale=1e-6),
           AsvMetric("track_inv_busbw", "busbw_GBps", "s/GB (1/busbw)", inverse=True),
           AsvMetric("track_peak_mem", memory.METRIC, memory.UNIT))
ASV = AsvLayout(
    "allreduce", "allreduce", "Allreduce",
    ("transport", "world_size", "size", "dtype", "timing", "straggler", "op"),
    _asv_values, METRICS,
    version="perfsuite-allreduce-5", sort_keys={"size": parse_size},
    measured=(MeasuredAxis(_asv_timing, _timings), STRAGGLER, OP_AXIS),
    migrations=(AxisAdded("perfsuite-allreduce-3", "perfsuite-allreduce-4", "straggler", "none"),
                AxisAdded("perfsuite-allreduce-4", "perfsuite-allreduce-5", "op", "sum")))


def _asv_variant(case: Case) -> tuple:
    op, root = collectives.op_root(case.variant)
    coll = collectives.get(case.benchmark)
    return (*_asv_values(case), *([op] if coll.reduces else []), *([root] if coll.rooted else []),
            *([collectives.splits_of(case.variant)] if coll.splits is not None else []))


def asv_layout(coll: Collective) -> AsvLayout:
    """Another collective's layout: allreduce's axes, its op, root and splits among the case's own."""
    return AsvLayout(
        coll.name, "collectives", coll.title,
        ("transport", "world_size", "size", "dtype", *(["op"] if coll.reduces else []),
         *(["root"] if coll.rooted else []), *(["splits"] if coll.splits is not None else []),
         "timing", "straggler"),
        _asv_variant, METRICS, version=f"perfsuite-{coll.name}-1", sort_keys={"size": parse_size},
        measured=(MeasuredAxis(_asv_timing, _timings), STRAGGLER))

OPTIONS = (
    Opt("sizes", DEFAULT_SIZES, f"message sizes: 4,1024,1MiB or a range MIN:MAX[:FACTOR], FACTOR {DEFAULT_SIZE_FACTOR} unless given",
        metavar="SIZES", parse=lambda text: parse_sizes(text, None)),
    Opt("dtypes", DEFAULT_DTYPE, "comma list of float32, float64, float16, bfloat16, int32, float8_e4m3, float8_e5m2 "
        "(or f8e4m3, f8e5m2; fp8 runs on nccl only)", metavar="LIST",
        parse=parse_dtypes),
    Opt("ops", "sum", "reduction ops of the collectives that reduce (allreduce, reduce_scatter, reduce): "
        "comma list of sum, prod, min, max, avg, or all (nccl-tests -o)", metavar="LIST", parse=parse_ops),
    Opt("root", "0", "the root rank of broadcast and reduce (nccl-tests -r)", metavar="RANK",
        parse=parse_root),
    Opt("splits", collectives.DEFAULT_SPLITS, "how alltoallv splits each rank's total over its peers: "
        "comma list of uniform (equal), zipf (receivers' popularity 1/(j+1), as an MoE's skewed expert "
        "load), distance (nccl-tests' distance-weighted pattern), or all", metavar="LIST",
        parse=parse_splits),
    Opt("inplace", False, "in-place collectives, out of place without it (broadcast is always in place; "
        "reduce_scatter, alltoall and alltoallv are skipped)", kind="flag", parse=bool, knob="inplace"),
    Opt("device-timing", "auto", "how GPU transports' calls are timed: auto (nccl: native-batch where its C "
        "loop builds, else batch with the reason; the others: batch), native-batch (a batch of calls "
        "issued by a C loop between one pair of CUDA events; nccl only, refused where it cannot build), "
        "batch (nccl-tests: the batch issued by Python between the events, a sample is its mean), "
        "per-call, or graph (the batch as one CUDA graph; nccl only)", metavar="MODE",
        parse=parse_device_timing, knob="device_timing"),
    Opt("host-timing", "auto", "how the mpi transport's calls are timed: auto (the native C loop, "
        "built with the MPI's mpicc on first use, else the mpi4py loop with the reason), native "
        "(refuse to run without it) or python (the mpi4py loop)", metavar="LOOP",
        parse=parse_host_timing, knob="host_timing"),
    Opt("no-validate", False, "skip checking each result against the exact expected sum", kind="flag",
        parse=lambda flag: not flag, knob="validate"),
)

def collective_spec(coll: Collective) -> BenchmarkSpec:
    """The benchmark of one collective: allreduce's cases, kernel, tables, layouts and
    options, its own record (``perfsuite.collectives``) and asv layout."""
    return BenchmarkSpec(
        coll.name, f"{coll.name} latency and busbw per transport, world size, size, dtype"
        + (" and op" if coll.reduces else "") + (" (root --root)" if coll.rooted else "")
        + (" and split distribution (--splits)" if coll.splits is not None else ""),
        kernel="perfsuite.kernels.collectives.allreduce", cases=cases, options=OPTIONS, table=table,
        asv=ASV if coll.name == "allreduce" else asv_layout(coll),
        wire_bytes=wire_bytes, judged=("latency_us",), report_rows=report_rows, layouts={"omb": omb_table},
        plots_by_size=True, tolerances=TOLERANCES, short_names=SHORT_NAMES)


SPEC = register(collective_spec(collectives.get("allreduce")))
