"""``python -m analysis figures RESULTS... -o DIR`` and ``python -m analysis report ...``."""

import sys

from analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
