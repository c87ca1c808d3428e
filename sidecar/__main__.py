"""`python -m sidecar`: the sidecar process next to one vLLM (what `tabletune sidecar` runs)."""

import sys

from sidecar.app import cli

sys.exit(cli())
