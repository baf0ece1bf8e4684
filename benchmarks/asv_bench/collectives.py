"""all_gather, reduce_scatter, alltoall, broadcast and reduce for ``asv run``, one class each,
made as ``allreduce.py``'s is from the collective's layout (``perfsuite.bench``): the parameters
are the pytest suite's case matrix, ``setup_cache`` starts the worlds once, each ``track_*``
reads its number from that cache. The op (collectives that reduce) and root (broadcast, reduce)
are axes of their own.
"""
from perfsuite import bench
from perfsuite.faces import asv_run


def _suite(name: str) -> type:
    layout = bench.asv_layout(name)
    cases = asv_run.bench_cases(name)

    def setup_cache(self):
        return asv_run.measure(cases)

    setup_cache.timeout = asv_run.bench_timeout(cases)

    def setup(self, cache, *values):
        asv_run.check_case(cache, name, *values)

    def track(method: str, unit: str):
        def tracked(self, cache, *values):
            return asv_run.tracked(cache, method, *values)

        tracked.unit = unit
        return tracked

    body = {"params": layout.params(cases), "param_names": list(layout.axes), "version": layout.version,
            "timeout": 60.0, "setup_cache": setup_cache, "setup": setup, "__module__": __name__}
    body.update({m.method: track(m.method, m.unit) for m in layout.metrics})
    return type(layout.suite, (), body)


AllGather = _suite("all_gather")
ReduceScatter = _suite("reduce_scatter")
AlltoAll = _suite("alltoall")
Broadcast = _suite("broadcast")
Reduce = _suite("reduce")
