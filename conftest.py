"""Root conftest. The perfsuite plugin itself loads through its pytest11 entry point
(``pip install -e .``); this file only keeps the suite's own scratch out of the repo."""
collect_ignore_glob = [".asv/*", "results/*", "html/*"]
