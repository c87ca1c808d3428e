"""Does the profile fit the engine the sidecar drives, and which k may the table use?

A table built from another engine's step times is wrong in ways no live counter shows, so a
profile whose K (num_speculative_tokens) or max_num_seqs differs from the engine's, or whose
model differs from ``--model-name``, is refused at start with what differs (ProfileMismatch).
``--model-name`` is vLLM's served name (its /metrics label ``model_name``): it matches the
profile's ``engine.served_model_name``, or the model's own name (what older profiles had).
"""

from __future__ import annotations

from pathlib import PurePath

import numpy as np

from tuner.core.admin_api import TableReply
from tuner.core.errors import InvalidInput, ProfileMismatch
from tuner.core.profile import EngineInfo, Profile

__all__ = ["allowed_ks", "check", "check_served_name", "mismatches", "prior_of",
           "resolve_allowed_k"]


def prior_of(profile: Profile) -> np.ndarray:
    """The profile's per-position acceptance a_i: the estimator's prior."""
    if profile.acceptance is None:
        raise InvalidInput("profile has no acceptance (a_i); finish `tabletune tune` so the "
                           "sidecar has a prior")
    if len(profile.acceptance.a) != profile.K:
        raise InvalidInput(f"profile: acceptance has {len(profile.acceptance.a)} values but "
                           f"num_speculative_tokens={profile.K}; re-run `tabletune tune`")
    return np.asarray(profile.acceptance.a, dtype=np.float64)


def _same_model(engine: EngineInfo, model_name: str) -> bool:
    """The served name, or the model's name; a path on either side by its last part (older
    profiles stored a path, and vLLM started without --served-model-name serves the path)."""
    return (model_name in (engine.served_model_name, engine.model)
            or PurePath(model_name).name == PurePath(engine.model).name)


def check_served_name(model_name: str | None, served: str) -> None:
    """InvalidInput when ``--model-name`` is not the name the engine serves (its /metrics label):
    every scrape would then find no series."""
    if model_name is not None and served != model_name:
        raise InvalidInput(f"--model-name {model_name!r} but the engine serves {served!r} (its "
                           f"/metrics label model_name); pass --model-name {served}")


def mismatches(profile: Profile, info: TableReply | None, num_positions: int | None,
               model_name: str | None) -> list[str]:
    """Human-readable differences between the profile and the engine (empty: they match)."""
    diffs = []
    engine = profile.engine
    if info is not None and info.num_speculative_tokens != engine.num_speculative_tokens:
        diffs.append(f"num_speculative_tokens: profile has {engine.num_speculative_tokens}, "
                     f"engine has {info.num_speculative_tokens}")
    if info is not None and info.max_num_seqs != engine.max_num_seqs:
        diffs.append(f"max_num_seqs: profile has {engine.max_num_seqs}, engine has "
                     f"{info.max_num_seqs}")
    if num_positions is not None and num_positions != engine.num_speculative_tokens:
        diffs.append(f"num_speculative_tokens: profile has {engine.num_speculative_tokens}, "
                     f"the engine's /metrics has {num_positions} draft positions")
    if model_name is not None and not _same_model(engine, model_name):
        served = (f" (served as {engine.served_model_name!r})" if engine.served_model_name
                  else "")
        diffs.append(f"model: profile has {engine.model!r}{served}, --model-name is "
                     f"{model_name!r}")
    return diffs


def check(profile: Profile, info: TableReply | None, num_positions: int | None = None,
          model_name: str | None = None) -> None:
    """Raise ProfileMismatch naming every difference; the fix is the right profile."""
    diffs = mismatches(profile, info, num_positions, model_name)
    if diffs:
        raise ProfileMismatch("the profile does not match the engine (" + "; ".join(diffs) +
                              "); run `tabletune tune` against this engine or pass the "
                              "profile measured for it")


def resolve_allowed_k(spec: str, info: TableReply | None,
                      num_speculative_tokens: int) -> set[int] | None:
    """The k the table may use: None means every k = 0..K.

    'startup' is the engine's startup table's K values (GET /v1/table); 'engine' the k's the
    plugin says its runner runs without a penalty (graph_k: the startup set on V2, every k on V1;
    a plugin that predates graph_k: 'startup'); without the admin endpoint (dry-run next to a
    stock vLLM) they are unknown and every k is allowed.
    """
    if spec == "all":
        return None
    if spec == "engine":
        if info is not None and info.graph_k is not None:
            graph = set(info.graph_k)
            return None if graph >= set(range(num_speculative_tokens + 1)) else graph
        spec = "startup"
    if spec == "startup":
        return set(info.startup_k) if info is not None and info.startup_k else None
    ks = {int(x) for x in spec.split(",")}
    too_big = sorted(k for k in ks if k > num_speculative_tokens)
    if too_big:
        raise ProfileMismatch(f"allowed_k={spec!r}: K={too_big} exceed the engine's "
                              f"num_speculative_tokens={num_speculative_tokens}")
    return ks


def allowed_ks(spec: str, min_k: int, info: TableReply | None, K: int) -> set[int] | None:
    """``resolve_allowed_k`` with the floor ``min_k`` (never fewer drafts than it)."""
    allowed = resolve_allowed_k(spec, info, K)
    if not min_k:
        return allowed
    floored = {k for k in (allowed or range(K + 1)) if k >= min_k}
    if not floored:
        raise ProfileMismatch(
            f"--min-k={min_k} leaves no k of --allowed-k={spec!r} (the engine's: "
            f"{sorted(info.startup_k) if info and info.startup_k else 'unknown'}); "
            "lower --min-k or pass --allowed-k all")
    return floored
