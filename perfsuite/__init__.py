"""perfsuite: a pytest-based performance regression suite for distributed deep learning."""
__version__ = "0.1.0"


def benchmark(fn=None, **axes):
    """Declare a distributed benchmark of your own: ``@perfsuite.benchmark(world_sizes=[2],
    params={"n": [1_000]})`` over ``def step(world, n)`` (``perfsuite.records.userbench``). Imported
    only when used: the ranks import this package and must stay light."""
    from .records.userbench import benchmark as declare

    return declare(fn, **axes)
