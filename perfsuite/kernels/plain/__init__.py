"""Programs written as a user writes them, with nothing of the harness in them: the yardsticks
``perfsuite overhead`` and the training kernels hold the harness to. Each runs alone under
mpiexec (``python -m perfsuite.kernels.plain.NAME``)."""
