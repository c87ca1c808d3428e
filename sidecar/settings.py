"""The sidecar's configuration: flags and TABLETUNE_SIDECAR_* environment variables.

One pydantic-settings model is the single source: `tabletune sidecar --help` is generated from
it, and the deploy manifests are checked against it (tests/deploy), so they cannot drift.
Precedence: flag > environment > default. Defaults work next to a vLLM on the same host.
"""

from __future__ import annotations

import argparse
import os
from math import ceil
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tuner.core.errors import InvalidInput

ENV_PREFIX = "TABLETUNE_SIDECAR_"
DESCRIPTION = ("Scrape vLLM's /metrics, estimate acceptance, rebuild the table with the profile's "
               "step times, push it (or only recommend). Most runs need only the first group; "
               "every flag in full: docs/sidecar.md, Flags.")
USAGE = "tabletune sidecar --profile FILE [--model-name NAME] [--dry-run] [options]"


class SidecarSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    profile: Path = Field(description="tuner profile (JSON) with step times and prior acceptance")
    engine_url: str = Field("http://127.0.0.1:8000", description="vLLM base URL (its /metrics is scraped)")
    admin_url: str = Field("http://127.0.0.1:8500", description="plugin admin endpoint (table, policy); unix:/path for its Unix-domain socket (TABLETUNE_ADMIN_UDS)")
    admin_token: SecretStr | None = Field(None, description="bearer token for the admin endpoint")
    admin_token_file: Path | None = Field(None, description="file holding the admin token")
    model_name: str | None = Field(None, description="vLLM's served model name (its /metrics label model_name): only those series are read; checked against the engine at start")
    interval_s: float = Field(1.0, gt=0, description="seconds between scrapes")
    rebuild_every_steps: int = Field(200, ge=1, description="rebuild after this many engine steps")
    prior_weight: float = Field(2000.0, ge=0, description="w: the prior counts as w observations")
    prior_decay: float = Field(1.0, gt=0, le=1, description="multiply w by this after each rebuild (0.5: halve; 1: off)")
    explore_every: int = Field(300, ge=0, description="plugin exploration: every N steps a run of explore_run steps at another allowed k, the k's taking turns, so every k keeps live acceptance (0: off; with explore_run 3, 300 explores 1 step in 100, half of explore_share: the rest is the duels' room)")
    explore_run: int = Field(3, ge=1, description="steps in one exploration run (its middle steps are steady and timed)")
    hysteresis: int = Field(2, ge=0, description="plugin edge hysteresis band h, in requests (0: off; "
                            "at most (width - 1) / 2 of the range B is in)")
    allowed_k: str = Field("engine", description="'engine' (every k the engine runs without a penalty, as its plugin reports: the startup table's K values on vLLM's V2 runner, all 0..K on V1), 'startup' (the startup table's K values), 'all', or e.g. '0,1,3'")
    min_k: int = Field(0, ge=0, description="never choose fewer drafts than this: an EAGLE-style drafter whose state goes stale at K=0 can lose acceptance when drafting resumes (the 'resume' condition says so)")
    decide_by: Literal["measured", "model"] = Field("measured", description="at the buckets the engine serves, compare k's by measured goodput (paired duels of the plugin's step ring) once the measurement is tighter than the model ('measured'), or by the model alone everywhere ('model')")
    model_error: float = Field(0.05, ge=0, description="the model's own error on a goodput ratio (log scale, one sigma), beyond what its draws show (0.05: what the H200's 32B model was off); the measurement decides once its interval is narrower than the model's widened one")
    duel_run: int = Field(16, ge=5, le=256, description="steps of one duel run at a challenger k (all but the first are steady, timed steps)")
    explore_share: float = Field(0.02, ge=0, le=0.5, description="all exploration (the rotation and the duels) takes at most this share of the steps in any explore_horizon steps")
    explore_horizon: int = Field(10000, ge=100, description="the window, in engine steps, over which explore_share holds (duel runs spread at least run / (4·explore_share) steps apart, then nothing until the window frees)")
    duel_width: int = Field(1, ge=1, description="challengers dueled at once per bucket, the most promising (highest upper bound) first: one at a time spends the exploration budget where it can settle")
    pair_variance_factor: float = Field(1.0, ge=1.0, le=20.0, description="widen the duels' confidence sequence beyond the long-run variance it estimates from the pairs themselves (sidecar/measured.py, eq. LRV): a factor on that variance (1: as estimated; `python -m benchmarks.pair_dependence LOG` reads how alike this sidecar's `pair` events are)")
    urgent_share: float = Field(0.25, ge=0, le=0.5, description="the exploration share while the model is sure, beyond --model-error, that a dueled challenger beats the table, until its first 4 pairs and then while their mean agrees, so a wrong table is measured within one explore_horizon (0: never more than explore_share); the measurement still decides")
    max_pairs: int = Field(40, ge=5, description="paired runs after which an unresolved challenger is called indistinguishable and its duel ends")
    min_served: int = Field(32, ge=1, description="steps a bucket must serve since the last push that changed it before its k is decided there")
    tie: float = Field(0.005, ge=0, description="keep the previous B's k unless another is this much better")
    confidence: float = Field(0.9, ge=0.5, lt=1, description="a rebuild changes a range's k only when its gain beats the tie at this confidence (lower bound)")
    step_prior_weight: float = Field(100.0, ge=0, description="w_T: the profile's step time counts as this many live steps of a (B bucket, k) cell")
    step_memory: float = Field(2000.0, gt=0, description="live steps kept per (B bucket, k) cell after a rebuild; a cell with more is scaled down to this many")
    step_prior_decay: float = Field(1.0, gt=0, le=1, description="multiply w_T by this after each rebuild (1: off)")
    step_cv: float = Field(0.2, gt=0, description="spread of one live step's log time, for the interval of the live step times")
    change_window: int = Field(3, ge=1, description="acceptance change: scrapes with drafts in each of the two windows that must both leave the recent past the same way (sidecar/acceptance_change.py)")
    change_window_s: float = Field(3.0, ge=0, description="acceptance change: each window also spans at least this many seconds of scrapes, longer than a burst's first seconds")
    change_z: float = Field(6.0, gt=0, description="acceptance change: |z| of each window against the recent past beyond this (and change_min_delta apart)")
    change_min_delta: float = Field(0.1, ge=0, description="acceptance change: each window and the recent past at least this far apart (absolute)")
    change_step_ratio: float = Field(1.7, gt=1, description="step-time change: a cell's steps this factor away from its level (the median of its last 2 minutes), the same way, in both of two 12-s windows; above what a shared CPU's noise reached (×1.5-1.85 for ~18 s), below the 2x change that matters (sidecar/change.py)")
    change_prior_weight: float = Field(50.0, ge=0, description="after a detected change of acceptance, w is at most this")
    guard_window: int = Field(5, ge=0, description="guardrail: samples before and after a push compared (0: off)")
    guard_min_steps: float = Field(100.0, ge=0, description="guardrail: consecutive scrapes pooled into one sample until it holds this many engine steps (0: every scrape a sample)")
    guard_drop: float = Field(0.05, gt=0, lt=1, description="guardrail: roll back a push whose live goodput drops by more than this (and beyond noise)")
    guard_hold_s: float = Field(600.0, ge=0, description="guardrail: a rolled-back table is not pushed again for this long")
    dry_run: bool = Field(False, description="never write to the engine: only compute and publish the recommended table")
    listen_host: str = Field("127.0.0.1", description="bind address of the sidecar's own HTTP server")
    listen_port: int = Field(9109, ge=0, le=65535, description="port of /healthz, /readyz, /metrics, /v1/state")
    checkpoint: Path | None = Field(None, description="estimator state file, written atomically after every rebuild")
    foreign_hold_s: float = Field(300.0, ge=0, description="after someone else changes the engine's table: only recommend for this long, then push again (0: reassert ours at once)")
    drift_warn: float = Field(0.15, ge=0, description="warn when live steps are this much slower than the profile")
    timeout_s: float = Field(2.0, gt=0, description="timeout of every request to vLLM or the plugin")
    max_metrics_bytes: int = Field(4 * 1024 * 1024, ge=64 * 1024, description="largest /metrics (or admin) reply read; a larger one is refused unparsed (vLLM's is ~50-70 KB)")
    retry_attempts: int = Field(3, ge=1, le=10, description="tries per admin request (connection errors, timeouts, 5xx; never 4xx)")
    backoff_max_s: float = Field(10.0, gt=0, description="longest pause between scrapes while vLLM keeps failing")
    log_format: Literal["json", "plain"] = Field("json", description="log line format")
    access_log: bool = Field(False, description="log requests to the sidecar's own HTTP server (not probes or /metrics) on stdout; the event log on stderr never has them")
    nice: int = Field(10, ge=0, le=19, description="lower the sidecar's CPU priority by this much at start (os.nice), so on cores it shares with vLLM in the same container or login session its rebuilds wait for the engine's processes (0: as started); in its own container (deploy/) niceness does not reach across, and the container's CPU request decides")

    @model_validator(mode="after")
    def _check(self) -> SidecarSettings:
        if self.allowed_k not in ("engine", "startup", "all"):
            try:
                ks = [int(x) for x in self.allowed_k.split(",")]
            except ValueError:
                raise ValueError(f"allowed_k={self.allowed_k!r}: use 'engine', 'startup', 'all' or "
                                 "comma-separated integers like '0,1,3'") from None
            if not ks or min(ks) < 0:
                raise ValueError(f"allowed_k={self.allowed_k!r}: K values must be >= 0")
        if self.min_k and self.allowed_k not in ("engine", "startup", "all") and all(
                int(x) < self.min_k for x in self.allowed_k.split(",")):
            raise ValueError(f"min_k={self.min_k} excludes every k of allowed_k={self.allowed_k!r}")
        if self.explore_every and self.explore_run / self.explore_every > self.explore_share:
            fix = (f"explore_every of at least {ceil(self.explore_run / self.explore_share)}"
                   if self.explore_share else "explore_every=0")
            raise ValueError(
                f"explore_every={self.explore_every} with explore_run={self.explore_run} explores "
                f"{self.explore_run / self.explore_every:.1%} of the steps, more than "
                f"explore_share={self.explore_share} lets the plugin run: use {fix}, or a larger "
                "explore_share")
        return self

    def token(self) -> str | None:
        if self.admin_token is not None:
            return self.admin_token.get_secret_value()
        if self.admin_token_file is not None:
            return self.admin_token_file.read_text().strip() or None
        return None


# `tabletune sidecar --help`: the flags a user sets first, then the rest by what they tune, each
# in a few plain words (the full meaning is the field's description, in docs/sidecar.md)
HELP_GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("what you set", (
        ("profile", "the profile `tabletune tune` wrote for this engine (required)"),
        ("model_name", "the model name vLLM serves (its --served-model-name)"),
        ("engine_url", "vLLM's base URL"),
        ("admin_url", "the plugin's admin endpoint (TABLETUNE_ADMIN_PORT)"),
        ("admin_token", "the plugin's admin token, if it has one"),
        ("admin_token_file", "or a file holding it"),
        ("dry_run", "only recommend a table, never change the engine"),
        ("checkpoint", "a file to keep what was learned across restarts"))),
    ("learning acceptance and step times", (
        ("interval_s", "seconds between reads of the engine's counters"),
        ("rebuild_every_steps", "engine steps between table rebuilds"),
        ("prior_weight", "how many observations the profile's acceptance is worth"),
        ("prior_decay", "shrink that weight after each rebuild"),
        ("step_prior_weight", "how many live steps the profile's step time is worth"),
        ("step_memory", "live steps kept per batch-size bucket and k"),
        ("step_prior_decay", "shrink that weight after each rebuild"),
        ("step_cv", "noise of one live step's time"),
        ("drift_warn", "warn when live steps are this much slower than the profile"))),
    ("choosing the table", (
        ("allowed_k", "which k the table may use (engine, startup, all, or a list)"),
        ("min_k", "never fewer drafts than this"),
        ("decide_by", "measured goodput where the engine runs, or the model alone"),
        ("model_error", "how far the model's goodput ratios may be off"),
        ("tie", "a gain smaller than this is a tie"),
        ("confidence", "how sure a change must be"),
        ("min_served", "steps a bucket must serve before its k is decided"),
        ("hysteresis", "hold k near a range's edge for this many requests"))),
    ("exploring other k's", (
        ("explore_every", "every N steps, a short run at another k"),
        ("explore_run", "steps in one such run"),
        ("explore_share", "at most this share of steps explores"),
        ("explore_horizon", "over any this many steps"),
        ("duel_run", "steps of one comparison run"),
        ("duel_width", "challengers compared at once per bucket"),
        ("urgent_share", "the share while the model is sure the table is wrong"),
        ("pair_variance_factor", "widen comparisons beyond their estimate"),
        ("max_pairs", "pairs after which two k's are called equal"))),
    ("changes of traffic", (
        ("change_window", "reads per window for an acceptance change"),
        ("change_window_s", "or at least this many seconds"),
        ("change_z", "how far (in sigmas) a change must be"),
        ("change_min_delta", "and at least this far (absolute acceptance)"),
        ("change_step_ratio", "a step-time change is this ratio"),
        ("change_prior_weight", "the profile's weight after a change"))),
    ("guardrail", (
        ("guard_window", "samples before and after a push compared (0: off)"),
        ("guard_min_steps", "engine steps pooled into one sample"),
        ("guard_drop", "roll back a push that loses more than this"),
        ("guard_hold_s", "then keep that table out for this long"),
        ("foreign_hold_s", "after someone else changes the table, wait this long"))),
    ("serving, logs and connection", (
        ("listen_host", "the sidecar's own HTTP address"),
        ("listen_port", "and port (/healthz, /readyz, /metrics, /v1/state)"),
        ("log_format", "json or plain"),
        ("access_log", "log requests to the sidecar's HTTP server"),
        ("nice", "lower the sidecar's CPU priority by this much"),
        ("timeout_s", "timeout of each request to vLLM"),
        ("max_metrics_bytes", "largest reply read"),
        ("retry_attempts", "tries per admin request"),
        ("backoff_max_s", "longest pause while vLLM keeps failing"))),
)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# Not pydantic-settings' CliSettingsSource: this bridge is ~40 lines, hangs under `tabletune`'s own
# argparse tree, and turns a ValidationError into one InvalidInput naming flag, env and value
# (never a token's); the CLI source would need the same error path rebuilt around it.
def _metavar(name: str, info: Any) -> str:
    kind = info.annotation
    return ("URL" if name.endswith("_url") else "NAME" if name == "model_name" else
            "N" if kind is int else "X" if kind is float else "FILE" if "Path" in str(kind) else "TEXT")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per settings field, in HELP_GROUPS' groups and words."""
    fields = SidecarSettings.model_fields
    for title, members in HELP_GROUPS:
        group = parser.add_argument_group(title)
        for name, words in members:
            info = fields[name]
            env = ENV_PREFIX + name.upper()
            default = "" if info.is_required() or info.default in (None, False) else (
                f" (default {info.default})")
            if info.annotation is bool:
                group.add_argument(flag(name), dest=name, action="store_true", default=None,
                                   help=f"{words}; env {env}")
            else:
                group.add_argument(flag(name), dest=name, default=None, metavar=_metavar(name, info),
                                   help=f"{words}{default}; env {env}")


def from_args(args: argparse.Namespace) -> SidecarSettings:
    """Flags over environment over defaults; InvalidInput naming the flag, its value and the fix."""
    given: dict[str, Any] = {n: getattr(args, n) for n in SidecarSettings.model_fields
                             if getattr(args, n, None) is not None}
    try:
        return SidecarSettings(**given)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        where = (f"{flag(name)} (env {ENV_PREFIX}{name.upper()})" if name in
                 SidecarSettings.model_fields else "settings")
        if error["type"] == "missing":  # its input is the whole settings dict: nothing to show
            raise InvalidInput(f"{where} is required; see `tabletune sidecar --help`") from None
        if name not in SidecarSettings.model_fields:  # a rule across fields: its message names
            # them; the input is every setting, the admin token included, so it is not shown
            raise InvalidInput(f"{error['msg'].removeprefix('Value error, ')}; "
                               "see `tabletune sidecar --help`") from None
        value = given.get(name, os.environ.get(ENV_PREFIX + name.upper(), error.get("input")))
        shown = "" if name.startswith("admin_token") and name != "admin_token_file" else f"={value!r}"
        raise InvalidInput(f"{where}{shown}: {error['msg']}; see `tabletune sidecar --help`") from None


def flags_table() -> str:
    """The Markdown table of flags in docs/sidecar.md, generated from the fields (a test
    keeps the two equal)."""
    rows = ["| flag | env | default | meaning |", "|---|---|---|---|"]
    for name, info in SidecarSettings.model_fields.items():
        default = ("required" if info.is_required() else
                   "" if info.default is None else f"`{info.default}`")
        rows.append(f"| `{flag(name)}` | `{ENV_PREFIX}{name.upper()}` |"
                    f"{' ' + default if default else ''} | {info.description} |")
    return "\n".join(rows) + "\n"


def parser() -> argparse.ArgumentParser:
    """`python -m sidecar` / `tabletune sidecar`: one flag per settings field."""
    p = argparse.ArgumentParser(prog="tabletune sidecar", usage=USAGE, description=DESCRIPTION)
    add_arguments(p)
    return p
