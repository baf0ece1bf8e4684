"""The native timed loops on the launching side: their C sources (``c/``) and their builds, with
the MPI's own ``mpicc`` (``mpi.py``) or against NCCL's header (``nccl.py``), cached per user. The
ranks load what was built through ``transports/native.py`` and ``transports/native_nccl.py``: a
rank imports nothing of the launching side."""
