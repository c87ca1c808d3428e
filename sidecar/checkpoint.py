"""Atomic save and restore of the estimator state (eq. â's prior, w and live counts).

Written after every rebuild and at shutdown: a temporary file in the same folder, fsync,
then ``os.replace``, so a crash mid-write leaves the previous checkpoint intact.

The checkpoint names the profile it was written for by a hash of the profile's measured
content (:func:`profile_id`), apart from the prior it holds: after a detected change of traffic
the estimate becomes the prior (sidecar/belief.py), so the saved prior is no longer the
profile's and cannot tell "the same profile, rebased" from "another profile". Schema 1 had no
such field and compared priors (a rebased prior restored as "another profile": prior and w back
to the profile's, â from ~0.03 back to ~0.98, issue #27.1); it is still read, that way.

Since schema 3 it also holds the table the sidecar wants the engine to run and the engine's
table version under it: a sidecar killed while it reasserted its table against someone
else's, restarted, would otherwise take that table as its own baseline and keep it at every
batch size not served since (issue #39.4); sidecar/engine_table.py applies the foreign-table
rule to it instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from sidecar.estimator import EstimatorState
from tuner.core.errors import InvalidInput, TableTuneError
from tuner.core.files import write_atomic
from tuner.core.profile import Profile
from tuner.core.table import Table

__all__ = ["SCHEMA_VERSION", "Saved", "SavedTable", "load", "profile_id", "read", "restore",
           "save", "saved_table"]

log = logging.getLogger("sidecar")

SCHEMA_VERSION = 3
# what a profile measured; settings of the choice (tie, confidence, table) and bookkeeping
# (created_at, timings_s) may change without making the adaptation on top of it stale
MEASURED = {"engine", "grid", "decode_tokens", "cells", "samples", "acceptance", "workload",
            "graph"}


class Saved(BaseModel):
    """The checkpoint file (schema 1: no ``profile_sha256``; before 3: no ``table``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1, 2, 3]
    saved_at: float
    profile_sha256: str | None = None
    estimator: dict[str, Any]
    # the table the sidecar wants the engine to run, and the engine's table version when it
    # last ran it: a restart that finds another table knows it is not its own (issue #39.4)
    table: list[list[int]] | None = None
    table_version: int | None = None


@dataclass(frozen=True, slots=True)
class SavedTable:
    """What the sidecar last wanted the engine to run, and the version it ran under."""
    table: Table
    version: int | None


def profile_id(profile: Profile) -> str:
    """sha256 of the profile's measured content as canonical JSON (keys sorted)."""
    content = profile.model_dump(mode="json", include=MEASURED)
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def save(path: Path, state: EstimatorState, saved_at: float, profile_sha256: str,
         table: SavedTable | None = None) -> None:
    """Write ``state`` (and the table we want) to ``path`` atomically (tmp + fsync +
    os.replace)."""
    saved = Saved(schema_version=SCHEMA_VERSION, saved_at=saved_at,
                  profile_sha256=profile_sha256, estimator=state.to_dict(),
                  table=None if table is None else table.table.to_list(),
                  table_version=None if table is None else table.version)
    write_atomic(path, saved.model_dump_json())


def saved_table(path: Path | None, profile_sha256: str) -> SavedTable | None:
    """The table a checkpoint of this profile says we wanted; None without one (no file, an
    older schema, another profile, or unreadable: restore() already said why)."""
    try:
        found = None if path is None else read(path)
    except InvalidInput:
        return None
    if found is None or found[0].table is None or found[0].profile_sha256 != profile_sha256:
        return None
    try:
        table = Table.from_list(found[0].table)
    except TableTuneError:
        return None
    return SavedTable(table, found[0].table_version)


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
