"""Stash's stalls, one feature in one folder: the decomposition of a training step by differences
of epochs (``stash.py``, a pure rule), the benchmark record its worlds run (``benchmark.py``), the
dataset files they read (``dataset.py``) and the experiment that runs the epochs on a cold or warm
cache, cut threads or a cut link (``experiment.py``). ``perfsuite stalls`` is its face."""
