"""What is published carries no machine paths and no hardware serials: results, profiles and
manifests are read by people on other machines (and a GPU's UUID identifies one card)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PUBLISHED = [ROOT / "benchmarks" / "results", ROOT / "deploy" / "base" / "profile",
             ROOT / "deploy" / "llm-d" / "tabletune" / "profile", ROOT / "docs"]
MACHINE = re.compile(r"(?<![\w$.])/(root|home|tmp|work|Users)/[\w.-]+|GPU-[0-9a-fA-F]{8}-")


def test_no_machine_paths_or_gpu_serials_in_published_files() -> None:
    found = []
    for folder in PUBLISHED:
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".md", ".csv", ".txt", ".yaml"):
                for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if MACHINE.search(line):
                        found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()[:120]}")
    assert not found, "\n".join(found[:20])
