"""What a collective is, one small record per collective (nccl-tests' ``struct testColl`` in
``src/all_gather.cu`` and its siblings): its buffers' counts, nccl-tests' busbw factor, the
bytes it must put on the wires, the values each rank sends and the exact values each rank must
receive. The timed loop, checking, statistics and tables are the shared kernel's
(``perfsuite.kernels.collectives.allreduce``); which transports make the call is theirs (``collectives``).

The records sit on the ground floor beside ``model`` because both sides read them: the ranks
(buffers, expected values) and the benchmark registry (cases, tables, asv).

Values are small integers chosen so every reduction is exact in every type, bfloat16 included
(8 significant bits: integers to 256): rank r sends ``i % 4 + r + 1`` at element i, and for
``prod`` a 1 or a 2, so a product is a power of two. Exact to 19 ranks in bfloat16 (a sum
reaches 3n + n(n+1)/2), 60 in float16.

fp8 holds too few bits for those (e4m3: integers to 16, e5m2: to 8), so its values are 0s and
1s (``rank_values``' ``small``): rank r sends ``(i + r) % 2``, prod still a 1 or a 2. Checked bit
for bit, not within a tolerance: nccl-tests does the same (verifiable/verifiable.cu keeps every
float sum's integers within the significand, tolerance 0 but for avg), and NCCL rounds each
partial sum to fp8, so values whose every partial sum is an integer the type holds give one
answer in any order of summation. That holds to ``FP8_EXACT_RANKS`` ranks (``inexact`` says
where it stops; an avg is exact only where n is a power of two, 1/n then exact too).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..records.model import DTYPES, FP8, storage_dtype

PATTERN = 4
#: Values a sum of which is exact: the ``avg`` of them is exact where n is a power of two
#: (a half or quarter); other world sizes' averages are compared as the library rounds them.
OPS = ("sum", "prod", "min", "max", "avg")
#: Seconds of timed calls per size when ``--iters`` is not given (``--max-time``): a world sweeps
#: 13 sizes, so half a second a size keeps a slow transport's world near ten seconds, while a
#: fast one keeps OMB's counts. pytest-benchmark's 1 s is per benchmark, as a user's step has it
#: (``userbench.DEFAULT_MAX_TIME_S``).
SIZE_MAX_TIME_S = 0.5
#: How an irregular collective (alltoallv) splits what each rank sends over its peers: an
#: axis of its cases, named in the case's variant as op and root are (``splits_of``).
SPLITS = ("uniform", "zipf", "distance")
DEFAULT_SPLITS = "uniform"
#: M[i][j] = elements rank i sends rank j (alltoallv's split matrix), hashable so that it rides
#: on the bound call (``transports.base.Call.splits``).
Matrix = tuple[tuple[int, ...], ...]


#: Each fp8 type's (exponent bits, mantissa bits, largest finite value): e4m3 is the "fn"
#: form NCCL's __nv_fp8_e4m3 is (bias 7, no infinity, 0x7f/0xff NaN), e5m2 IEEE-like (bias 15).
FP8_LAYOUT = {"float8_e4m3": (4, 3, 448.0), "float8_e5m2": (5, 2, 57344.0)}
#: Most ranks whose fp8 results stay exact: every integer up to 2^(mantissa bits + 1) is held,
#: and sums of 0s and 1s, a zero sum's partial sums (below n) and prod's 2^ceil(n/2) stay within.
FP8_EXACT_RANKS = {"float8_e4m3": 16, "float8_e5m2": 8}


def fp8_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """Numbers as the bits of fp8 ``dtype`` (uint8), exactly: a value the type cannot hold
    raises instead of rounding, since a rounded expected value would hide a wrong result."""
    exp_bits, man_bits, largest = FP8_LAYOUT[dtype]
    bias = (1 << (exp_bits - 1)) - 1
    v = np.asarray(values, np.float64)
    a = np.abs(v)
    frac, exp = np.frexp(a)  # a = frac x 2^exp, frac in [0.5, 1)
    field = exp - 1 + bias  # the biased exponent of a normal number
    sub = (field < 1) | (a == 0)  # subnormals (and zero) count in units of 2^(1 - bias - man_bits)
    mant = np.where(sub, a * 2.0 ** (bias - 1 + man_bits), (2 * frac - 1) * (1 << man_bits))
    ok = np.isfinite(v) & (a <= largest) & (mant == np.floor(mant))
    if not ok.all():
        bad = v[~ok].ravel()[0]
        raise ValueError(f"{float(bad)!r} is not exactly a {dtype}; its values must be chosen to fit it")
    bits = np.where(sub, 0, field).astype(np.uint8) << man_bits | mant.astype(np.uint8)
    return bits | (np.signbit(v).astype(np.uint8) << 7)


def fp8_values(bits: np.ndarray, dtype: str) -> np.ndarray:
    """fp8 ``dtype``'s bits (uint8) as float64 (for messages and tests; NaN for NaN's bits)."""
    exp_bits, man_bits, _ = FP8_LAYOUT[dtype]
    bias = (1 << (exp_bits - 1)) - 1
    b = np.asarray(bits, np.uint8).astype(np.int64)
    field, mant = (b >> man_bits) & ((1 << exp_bits) - 1), b & ((1 << man_bits) - 1)
    mag = np.where(field == 0, mant * 2.0 ** (1 - bias - man_bits),
                   (1 + mant / (1 << man_bits)) * 2.0 ** (field - bias))
    top = field == (1 << exp_bits) - 1
    nan = top & (mant == (1 << man_bits) - 1) if dtype == "float8_e4m3" else top & (mant != 0)
    mag = np.where(top & ~nan & (dtype == "float8_e5m2"), np.inf, mag)
    return np.where(nan, np.nan, np.where(b >> 7, -mag, mag))


def as_type(values: np.ndarray, dtype: str) -> np.ndarray:
    """Exact small numbers as a host array of ``dtype``; bfloat16 is held as its 16 bits (the
    top half of a float32: exact for these values), since numpy has no bfloat16, and fp8 as its
    8 (``fp8_bits``)."""
    if dtype == "bfloat16":
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in FP8:
        return fp8_bits(values, dtype)
    return np.asarray(values).astype(storage_dtype(dtype))


def small(dtype: str) -> bool:
    """Does ``dtype`` take the 0-and-1 values (fp8: too few bits for the usual ones)?"""
    return dtype in FP8


def inexact(op: str, dtype: str, n: int, reduces: bool = True) -> str | None:
    """Why a reduction's result in ``dtype`` at ``n`` ranks could not be checked exactly (one
    line), or None. Only fp8 has such limits within the world sizes a machine runs."""
    if dtype not in FP8 or not reduces:
        return None
    if n > FP8_EXACT_RANKS[dtype]:
        return (f"{dtype} sums are exact only to {FP8_EXACT_RANKS[dtype]} ranks (its integers stop "
                f"at {FP8_EXACT_RANKS[dtype]}), so a result at {n} could not be checked")
    if op == "avg" and n & (n - 1):
        return (f"{dtype} avg at {n} ranks is not exact (1/{n} is no {dtype}, so NCCL's product "
                "rounds); fp8 avg runs where the world size is a power of two")
    return None


def rank_values(rank: int, count: int, op: str = "sum", dtype: str = "") -> np.ndarray:
    """What rank ``rank`` contributes at each of ``count`` elements (float64, exact)."""
    i = np.arange(count)
    if op == "prod":
        return (1 + (i + rank) % 2).astype(np.float64)
    if small(dtype):
        return ((i + rank) % 2).astype(np.float64)
    return (i % PATTERN + rank + 1).astype(np.float64)


def reduced(n: int, count: int, op: str = "sum", dtype: str = "") -> np.ndarray:
    """The exact reduction of ``rank_values`` over ranks 0..n-1 (float64)."""
    i = np.arange(count)
    if small(dtype) and op != "prod":
        ones = np.where(i % 2 == 0, n // 2, (n + 1) // 2).astype(np.float64)  # ranks with i + r odd
        if op in ("sum", "avg"):
            return ones if op == "sum" else ones / n
        if op in ("min", "max"):
            return np.minimum(ones, 1) if op == "max" else (ones == n).astype(np.float64)
    base = (i % PATTERN).astype(np.float64)
    if op == "sum":
        return base * n + n * (n + 1) // 2
    if op == "avg":
        return (base * n + n * (n + 1) // 2) / n
    if op == "min":
        return base + 1
    if op == "max":
        return base + n
    if op == "prod":  # element i gets a 2 from the ranks r with i + r odd
        return np.where(i % 2 == 0, 2.0 ** (n // 2), 2.0 ** ((n + 1) // 2))
    raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")


def zero_sum(rank: int, n: int, count: int, dtype: str = "") -> np.ndarray:
    """Small integers that sum to exactly 0 over the ranks (rank 0 holds -(n-1) v, the others
    v): in place, every allreduce's result is 0 again, so a whole timed loop's output is known."""
    i = np.arange(count)
    v = (i % 2 if small(dtype) else i % PATTERN + 1).astype(np.float64)
    return v * -(n - 1) if rank == 0 else v


@dataclass(frozen=True)
class Collective:
    """One collective. ``counts(count, n)`` -> (send count, recv count) per rank from the
    case's element count (nccl-tests' ``getCollByteCount``); ``inputs(rank, n, send_count, op,
    root)`` and ``expected(rank, n, recv_count, op, root)`` are exact float64 values (None: this
    rank's recv is not defined, as a non-root's in reduce). Each also takes the buffers' ``dtype``
    as a keyword, since fp8's values are ``small`` ones."""

    name: str
    title: str  # nccl-tests' and OMB's word: AllGather, Allgather
    omb_name: str  # the OSU benchmark that times the same call: osu_allgather
    omb_title: str  # its heading: "OSU MPI Allgather Latency Test"
    factor: Callable[[int], float]  # busbw = algbw x factor(n) (nccl-tests' doc/PERFORMANCE.md)
    factor_words: str  # the same in words: "2(n-1)/n"
    wire: Callable[[int], int]  # the least bytes on the wires per call, in units of the size
    counts: Callable[[int, int], tuple[int, int]]
    inputs: Callable[..., np.ndarray]  # (rank, n, count, op, root, dtype="")
    expected: Callable[..., np.ndarray | None]
    reduces: bool = False  # takes an op
    rooted: bool = False  # takes a root
    #: Its in-place form here, and where send sits in recv then (element offset; None: no
    #: in-place form, as NCCL's alltoall has none and MPI's reduce_scatter places its result
    #: apart from NCCL's).
    inplace_offset: Callable[[int, int, int], int] | None = None
    #: In place, every call leaves the same result, so the timed loop's output is checked too;
    #: else only a fresh call after the loop is (a reduce's root accumulates call on call).
    inplace_stable: bool = True
    #: In place, what each rank sends so that the result is stable (allreduce: a zero sum).
    stable_inputs: Callable[..., np.ndarray] | None = None
    stable_expected: Callable[..., np.ndarray] | None = None
    one_buffer: bool = False  # one buffer by nature (MPI_Bcast): always in place
    #: nccl-tests' count column, from (send count, recv count, n): the count the call is given
    #: (all_gather's per rank, alltoall's per peer); default the smaller buffer's.
    param: Callable[[int, int, int], int] = lambda send, recv, n: min(send, recv)
    #: OMB's message size in elements from (send count, recv count, n): osu_allgather's is one
    #: rank's contribution, osu_alltoall's one peer's; default the send buffer.
    omb: Callable[[int, int, int], int] | None = None
    #: An irregular collective (alltoallv): (split distribution, n, elements each rank sends) ->
    #: the split matrix. Its ``inputs`` and ``expected`` then take the matrix as ``matrix=``, and
    #: its buffers are the largest send and receive totals over ranks (nccl-tests' alltoallv).
    splits: Callable[[str, int, int], Matrix] | None = None

    def busbw_factor(self, n: int) -> float:
        """0 for one rank, whose call moves nothing over any bus."""
        return self.factor(n) if n > 1 else 0.0

    def wire_bytes(self, size_bytes: int, n: int, calls: int) -> int:
        return int(calls) * int(size_bytes) * self.wire(n) if n > 1 else 0

    def element_count(self, size_bytes: int, dtype: str, n: int) -> int:
        """The case's element count: its size in elements, rounded down to a multiple of the
        world size where the collective splits it across ranks (nccl-tests), at least one
        element per rank."""
        count = size_bytes // DTYPES[dtype]
        send, recv = self.counts(count, n)
        if max(send, recv) == 0:
            send, recv = self.counts(n, n)
        return max(send, recv)

    def matrix(self, size_bytes: int, dtype: str, n: int, splits: str = DEFAULT_SPLITS) -> Matrix:
        """The split matrix of a case of an irregular collective; () for a regular one."""
        if self.splits is None:
            return ()
        return self.splits(splits, n, self.counts(self.element_count(size_bytes, dtype, n), n)[0])

    def buffers(self, size_bytes: int, dtype: str, n: int, matrix: Matrix = ()) -> tuple[int, int]:
        """(send count, recv count) of one rank's buffers for a case of ``size_bytes``; with a
        split matrix, the largest send and receive totals over ranks, so every rank's buffers
        are alike and a rank that receives less keeps a zero pad (nccl-tests' alltoallv)."""
        if matrix:
            return max(sum(row) for row in matrix), max(sum(col) for col in zip(*matrix))
        return self.counts(self.element_count(size_bytes, dtype, n), n)

    def sizes(self, size_bytes: int, dtype: str, n: int, matrix: Matrix = ()) -> dict[str, int]:
        """What the tables print of a case: nccl-tests' size (the larger buffer, bytes) and
        count, and OMB's message size (bytes)."""
        send, recv = self.buffers(size_bytes, dtype, n, matrix)
        item = DTYPES[dtype]
        omb = self.omb(send, recv, n) if self.omb is not None else send
        return {"size_bytes": max(send, recv) * item, "count": self.param(send, recv, n),
                "omb_size_bytes": omb * item}


def split(count: int, n: int) -> int:
    return count // n


REGISTRY: dict[str, Collective] = {}


def register(c: Collective) -> Collective:
    REGISTRY[c.name] = c
    return c


def get(name: str) -> Collective:
    if not REGISTRY:
        from . import all_gather, allreduce, alltoall, alltoallv, broadcast, reduce, reduce_scatter  # noqa: F401
    return REGISTRY[name]


def find(name: str) -> Collective | None:
    get("allreduce")
    return REGISTRY.get(name)


NAMES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")
#: The regular collectives: every rank's counts follow from the case's count alone (MPI's word;
#: alltoallv is irregular). The C yardstick, the plain framework loops and the test worlds that
#: build buffers from ``counts`` run these.
REGULAR = NAMES[:6]


def variant(op: str = "sum", root: int = 0, splits: str = DEFAULT_SPLITS) -> str:
    """A case's variant for its op, root and splits: '' for sum at root 0 split uniformly,
    else 'max', 'root1', 'max-root1', 'zipf' (part of the case's name: allreduce[mpi-n2-4B-max],
    alltoallv[mpi-n4-1MiB-zipf])."""
    return "-".join([*([op] if op != "sum" else []), *([f"root{root}"] if root else []),
                     *([splits] if splits != DEFAULT_SPLITS else [])])


def op_root(text: str) -> tuple[str, int]:
    """The (op, root) a case's variant names; sum and root 0 where it names none."""
    op, root = "sum", 0
    for part in (p for p in text.split("-") if p):
        if part in OPS:
            op = part
        elif part.startswith("root") and part[4:].isdigit():
            root = int(part[4:])
    return op, root


def splits_of(text: str) -> str:
    """The split distribution a case's variant names; uniform where it names none."""
    return next((p for p in text.split("-") if p in SPLITS), DEFAULT_SPLITS)
