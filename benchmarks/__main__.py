"""`python -m benchmarks ...`: the bench (`tabletune bench` where the harness is importable)."""

import sys

from benchmarks.cli import main

sys.exit(main())
