"""Allreduce per transport, world size, message size and dtype, for ``asv run``.

The parameters come from the pytest suite's case matrix (``perfsuite.suite.select_cases``);
``PERFSUITE_ASV_<OPTION>`` variables narrow it like the perfsuite options do (for example
PERFSUITE_ASV_SIZES=4,1MiB PERFSUITE_ASV_TRANSPORTS=mpi,ring). ``setup_cache`` starts each world
(one per transport and world size) once through ``perfsuite.suite.run_one``; every ``track_*``
then reads its number from that cache (``perfsuite.faces.asv_run``). Numbers are lower-is-better
for asv: latency in seconds, 1/busbw in s/GB (see perfsuite.bench.asv_view), and the largest
rank's peak memory in MiB. ``timing`` is the loop that timed a case (native or python on the host,
a device timing on a GPU), ``straggler`` whether its world named a late rank (none or named),
``op`` its reduction: only the combination measured has a number. The other collectives are in ``collectives.py``.
"""
from perfsuite import bench
from perfsuite.faces import asv_run

LAYOUT = bench.asv_layout("allreduce")
CASES = asv_run.bench_cases("allreduce")


class Allreduce:
    params = LAYOUT.params(CASES)
    param_names = list(LAYOUT.axes)
    version = LAYOUT.version  # the recorder writes the same version: both paths share one history
    timeout = 60.0

    def setup_cache(self):
        return asv_run.measure(CASES)

    setup_cache.timeout = asv_run.bench_timeout(CASES)

    def setup(self, cache, transport, world_size, size, dtype, timing, straggler, op):
        asv_run.check_case(cache, "allreduce", transport, world_size, size, dtype, timing, straggler, op)

    def track_latency(self, cache, transport, world_size, size, dtype, timing, straggler, op):
        return asv_run.tracked(cache, "track_latency", transport, world_size, size, dtype, timing, straggler, op)

    track_latency.unit = "seconds"

    def track_inv_busbw(self, cache, transport, world_size, size, dtype, timing, straggler, op):
        return asv_run.tracked(cache, "track_inv_busbw", transport, world_size, size, dtype, timing, straggler, op)

    track_inv_busbw.unit = "s/GB (1/busbw)"

    def track_peak_mem(self, cache, transport, world_size, size, dtype, timing, straggler, op):
        return asv_run.tracked(cache, "track_peak_mem", transport, world_size, size, dtype, timing, straggler, op)

    track_peak_mem.unit = "MiB"
