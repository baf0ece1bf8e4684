"""A job's captured communication replayed on a world's transport (``window``: the kernel;
``issue``: each transport family's calls, buffers and checks)."""
