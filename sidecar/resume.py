"""Does acceptance drop right after a K=0 stretch? (pure)

An EAGLE-style drafter keeps state of its own (its KV cache, hidden states); upstream reports
say that state can go stale while a table runs K=0, and acceptance then drops when drafting
resumes. The plugin counts the request-steps verified right after a K=0 stretch apart
(``tabletune_resume_*_per_pos``). Here they are compared with the steady counts at position 1
(the first draft after the stretch): a drop is a resume rate below the steady rate by more
than ``min_drop`` (absolute) with a two-proportion z below ``-z``, on at least ``min_drafts``
resume drafts. The remedy is a floor: ``--min-k 1`` keeps drafting alive (the tuner's and the
sidecar's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["ResumeDrop", "ResumeTracker"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ResumeDrop:
    resume_rate: float     # accepted_1 / drafted_1 right after K=0 stretches
    steady_rate: float     # the same over the other request-steps
    resume_drafts: float
    z: float


@dataclass(slots=True)
class ResumeTracker:
    """Counts at position 1: right after K=0 stretches, and all (halved at each rebuild)."""

    resume: FloatArray = field(default_factory=lambda: np.zeros(2))   # accepted, drafted
    total: FloatArray = field(default_factory=lambda: np.zeros(2))

    def observe(self, resume_accepted: float, resume_drafted: float, accepted: float,
                drafted: float) -> None:
        self.resume += (max(resume_accepted, 0.0), max(resume_drafted, 0.0))
        self.total += (max(accepted, 0.0), max(drafted, 0.0))

    def halve(self) -> None:
        self.resume *= 0.5
        self.total *= 0.5

    def drop(self, min_drafts: float = 50.0, min_drop: float = 0.05,
             z: float = 3.0) -> ResumeDrop | None:
        (ra, rd), (ta, td) = self.resume, self.total
        sa, sd = ta - ra, td - rd  # steady: everything else
        if rd < min_drafts or sd < min_drafts:
            return None
        p_r, p_s = ra / rd, sa / sd
        pooled = (ra + sa) / (rd + sd)
        se = np.sqrt(max(pooled * (1 - pooled), 1e-9) * (1 / rd + 1 / sd))
        score = (p_r - p_s) / se
        if p_s - p_r > min_drop and score < -z:
            return ResumeDrop(round(float(p_r), 4), round(float(p_s), 4), float(rd),
                              round(float(score), 2))
        return None
