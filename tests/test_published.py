"""What is published carries no machine paths and no hardware serials: results, profiles and
manifests are read by people on other machines (and a GPU's UUID identifies one card)."""

from __future__ import annotations

import gzip
import re
import tarfile
from pathlib import Path

ROOT = Path(__file__).parents[1]
PUBLISHED = [ROOT / "benchmarks" / "results", ROOT / "deploy" / "base" / "profile",
             ROOT / "deploy" / "llm-d" / "tabletune" / "profile", ROOT / "docs"]
MACHINE = re.compile(r"(?<![\w$.])/(root|home|tmp|work|Users)/[\w.-]+|GPU-[0-9a-fA-F]{8}-")


TEXT = (".json", ".jsonl", ".md", ".csv", ".txt", ".yaml", ".log")


def texts(path: Path) -> list[tuple[str, str]]:
    """(name, text) of a published file, and of every text file inside a .gz or .tgz."""
    if path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path) as tar:
            return [(f"{path.name}:{m.name}", f.read().decode(errors="replace"))
                    for m in tar.getmembers() if m.isfile() and m.name.endswith(TEXT)
                    if (f := tar.extractfile(m)) is not None]
    if path.suffix == ".gz":
        return [(path.name, gzip.decompress(path.read_bytes()).decode(errors="replace"))]
    return [(path.name, path.read_text(errors="replace"))] if path.suffix in TEXT else []


def test_no_machine_paths_or_gpu_serials_in_published_files() -> None:
    found = []
    for folder in PUBLISHED:
        for path in (p for p in folder.rglob("*") if p.is_file()):
            for name, text in texts(path):
                for no, line in enumerate(text.splitlines(), 1):
                    if MACHINE.search(line):
                        found.append(f"{path.parent.relative_to(ROOT)}/{name}:{no}: "
                                     f"{line.strip()[:120]}")
    assert not found, "\n".join(found[:20])
