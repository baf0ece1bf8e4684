import sys

from . import main

# Guarded: a process pool (perfsuite validity's workers) imports the main module again.
if __name__ == "__main__":
    sys.exit(main())
