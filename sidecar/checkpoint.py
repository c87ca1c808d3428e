"""Atomic save and restore of the estimator state (eq. â's w and live counts).

Written after every rebuild and at shutdown: a temporary file in the same folder, fsync,
then ``os.replace``, so a crash mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.estimator import EstimatorState
from tuner.errors import InvalidInput
from tuner.files import write_atomic

__all__ = ["SCHEMA_VERSION", "load", "restore", "save"]

log = logging.getLogger("sidecar")

SCHEMA_VERSION = 1


def save(path: Path, state: EstimatorState, saved_at: float) -> None:
    """Write ``state`` to ``path`` atomically (tmp + fsync + os.replace)."""
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "saved_at": saved_at,
                            "estimator": state.to_dict()}
    write_atomic(path, json.dumps(data))


def load(path: Path) -> EstimatorState | None:
    """The saved state, None if there is no file; InvalidInput if it cannot be read back."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"checkpoint {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidInput(f"checkpoint {path} is not JSON ({exc}); delete it to start "
                           "from the profile's prior") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise InvalidInput(f"checkpoint {path}: schema_version {version!r}, this sidecar "
                           f"reads {SCHEMA_VERSION}; delete it to start from the prior")
    estimator = data.get("estimator")
    if not isinstance(estimator, dict):
        raise InvalidInput(f"checkpoint {path}: no 'estimator' object")
    return EstimatorState.from_dict(estimator)


def restore(path: Path | None, prior: npt.NDArray[np.float64], w: float) -> EstimatorState:
    """The checkpoint's w and live counts on ``prior``; a fresh state if there is none.

    The prior always comes from the profile. A checkpoint written for another prior (a new
    profile) keeps its live counts but starts w afresh; one for another K, or unreadable,
    is ignored with a warning: the sidecar starts from the prior instead of refusing.
    """
    fresh = EstimatorState(prior=prior, w=w)
    try:
        saved = None if path is None else load(path)
    except InvalidInput as exc:
        log.warning("checkpoint unreadable; starting from the prior", extra={"error": str(exc)})
        return fresh
    if saved is None:
        return fresh
    if saved.prior.size != fresh.prior.size:
        log.warning("checkpoint is for another K; starting from the prior",
                    extra={"checkpoint_k": saved.prior.size, "profile_k": fresh.prior.size})
        return fresh
    if np.allclose(saved.prior, fresh.prior):
        w = saved.w
    log.info("checkpoint restored", extra={"path": str(path), "w": w,
                                           "drafted": saved.drafted.tolist()})
    return EstimatorState(prior=fresh.prior, w=w, accepted=saved.accepted,
                          drafted=saved.drafted)
