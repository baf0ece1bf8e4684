"""``python -m perfsuite``: the command line, as the ``perfsuite`` script (``perfsuite.faces.cli:main``)."""
import runpy

# Guarded: a process pool (perfsuite validity's workers) imports the main module again. runpy
# runs perfsuite.faces.cli's own __main__, so both spellings are one command line, not two copies.
if __name__ == "__main__":
    runpy.run_module("perfsuite.faces.cli", run_name="__main__", alter_sys=True)
