"""asv benchmarks of perfsuite (``benchmark_dir`` in asv.conf.json). Not named test_*.py, so
``pytest benchmarks`` never collects them; both are generated from the same case matrix."""
