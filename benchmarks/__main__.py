"""`python -m benchmarks ...`: the bench, from a source checkout (benchmarks/ is not shipped)."""

import sys

from benchmarks.cli import main

sys.exit(main())
