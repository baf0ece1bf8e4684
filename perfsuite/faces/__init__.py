"""The faces beside the CLI and the pytest plugin, on the top floor: ``asv_run`` (what
``benchmarks/asv_bench`` needs under ``asv run``) and ``asv_offline`` (the published asv site
without internet). Below them the asv store (``perfsuite.asv``) keeps and reads the history."""
