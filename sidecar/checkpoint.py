"""Atomic save and restore of the estimator state (eq. â's prior, w and live counts).

Written after every rebuild and at shutdown: a temporary file in the same folder, fsync,
then ``os.replace``, so a crash mid-write leaves the previous checkpoint intact.

The checkpoint names the profile it was written for by a hash of the profile's measured
content (:func:`profile_id`), apart from the prior it holds: after a detected change of traffic
the estimate becomes the prior (controller._rebase_prior), so the saved prior is no longer the
profile's and cannot tell "the same profile, rebased" from "another profile". Schema 1 had no
such field and compared priors (a rebased prior restored as "another profile": prior and w back
to the profile's, â from ~0.03 back to ~0.98, issue #27.1); it is still read, that way.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from sidecar.estimator import EstimatorState
from tuner.core.errors import InvalidInput
from tuner.core.files import write_atomic
from tuner.core.profile import Profile

__all__ = ["SCHEMA_VERSION", "Saved", "load", "profile_id", "read", "restore", "save"]

log = logging.getLogger("sidecar")

SCHEMA_VERSION = 2
# what a profile measured; settings of the choice (tie, confidence, table) and bookkeeping
# (created_at, timings_s) may change without making the adaptation on top of it stale
MEASURED = {"engine", "grid", "decode_tokens", "cells", "samples", "acceptance", "workload",
            "graph"}


class Saved(BaseModel):
    """The checkpoint file (schema 1: no ``profile_sha256``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1, 2]
    saved_at: float
    profile_sha256: str | None = None
    estimator: dict[str, Any]


def profile_id(profile: Profile) -> str:
    """sha256 of the profile's measured content as canonical JSON (keys sorted)."""
    content = profile.model_dump(mode="json", include=MEASURED)
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def save(path: Path, state: EstimatorState, saved_at: float, profile_sha256: str) -> None:
    """Write ``state`` to ``path`` atomically (tmp + fsync + os.replace)."""
    saved = Saved(schema_version=SCHEMA_VERSION, saved_at=saved_at,
                  profile_sha256=profile_sha256, estimator=state.to_dict())
    write_atomic(path, saved.model_dump_json())


def read(path: Path) -> tuple[Saved, EstimatorState] | None:
    """The file and its state, None if there is no file; InvalidInput if it cannot be read."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"checkpoint {path}: {exc.strerror}") from None
    try:
        saved = Saved.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise InvalidInput(f"checkpoint {path}: {where}: {first['msg']} (this sidecar reads "
                           f"schema_version 1 and {SCHEMA_VERSION}); delete it to start from "
                           "the profile's prior") from None
    return saved, EstimatorState.from_dict(saved.estimator)


def load(path: Path) -> EstimatorState | None:
    """The saved state, None if there is no file; InvalidInput if it cannot be read back."""
    found = read(path)
    return None if found is None else found[1]


def restore(path: Path | None, prior: npt.NDArray[np.float64], w: float,
            profile_sha256: str) -> EstimatorState:
    """What the checkpoint holds, if it was written for this profile; else the profile's prior.

    - this profile (same hash): prior, w and live counts exactly as saved;
    - another profile: its live counts on this profile's prior and ``w`` (what was observed
      still holds, the weight given to the old prior does not);
    - schema 1 (no hash): as it did, w only where the saved prior is the profile's;
    - another K, or unreadable: ignored with a warning; the sidecar starts from the prior.
    """
    fresh = EstimatorState(prior=prior, w=w)
    try:
        found = None if path is None else read(path)
    except InvalidInput as exc:
        log.warning("checkpoint unreadable; starting from the prior", extra={"error": str(exc)})
        return fresh
    if found is None:
        return fresh
    saved, state = found
    if state.prior.size != fresh.prior.size:
        log.warning("checkpoint is for another K; starting from the prior",
                    extra={"checkpoint_k": state.prior.size, "profile_k": fresh.prior.size})
        return fresh
    if saved.profile_sha256 == profile_sha256:
        log.info("checkpoint restored", extra={"path": str(path), "prior": state.prior.tolist(),
                                               "w": state.w, "drafted": state.drafted.tolist()})
        return state
    same = saved.profile_sha256 is None and np.allclose(state.prior, fresh.prior)
    log.info("checkpoint restored: live counts only, for another profile" if not same
             else "checkpoint restored (schema 1)",
             extra={"path": str(path), "w": state.w if same else w,
                    "drafted": state.drafted.tolist()})
    return EstimatorState(prior=fresh.prior, w=state.w if same else w,
                          accepted=state.accepted, drafted=state.drafted)
