"""The bench's policies: which are tables (swapped through the plugin on one engine) and which
are not (no speculation: its own server; a sidecar or the bandit: state that learns), and the
table each table policy pushes. Pure.

Table policies: `fixed-k0..K`, `documented` (vLLM's documented table fitted to the engine),
`quarter` (the documented table with every range shrunk to a quarter, then fitted: the paper's
deliberately wrong table, which stops speculating above B=32), `tuned` (the profile's),
`tuned@tie=X` (the profile rebuilt with another tie), `tuned-of:PATH` (the table another profile
of the same engine stored: an older tune against this one), `turbospec-style` (tuner/baselines),
and `aa:P`: table P again under a second name, the run's A/A.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.baselines import turbospec_table
from tuner.core.errors import InvalidInput
from tuner.core.profile import Profile, load
from tuner.core.table import DOCUMENTED_RANGES, Table, documented_table, shrink

NOSPEC = "nospec"
NIGHTJAR = "nightjar-style"
# a sidecar's start table; `sidecar-from-tuned` starts from the bench profile's own table, so with
# a pure-decode profile it is the case the live step times are for (does it leave a k the serving
# steps make slow?)
SIDECAR = "sidecar-from-"
WATCH = "watch-from-"   # a sidecar that only observes (--dry-run): the price of reading alone
SIDECAR_KINDS = {"sidecar": SIDECAR, "watch": WATCH}  # a record's key (meta, log) -> prefix
# the start tables: the paper's wrong one, the documented, the tuned, and a fixed k (a table
# wrong everywhere but one k, so the sidecar has something to earn on any engine)
SIDECAR_POLICIES = {f"{kind}{t}": t for kind in SIDECAR_KINDS.values()
                    for t in ("quarter", "documented", "tuned", *(f"fixed-k{k}" for k in range(8)))}
PAIRED = (NOSPEC, NIGHTJAR, *SIDECAR_POLICIES)  # not tables: their own blocks, paired with a fixed k
TIE = "tuned@tie="
AA = "aa:"
OTHER = "tuned-of:"   # tuned-of:PATH, the table another profile stored (e.g. an older tune)
DEFAULT = (f"fixed-k*,documented,tuned,quarter,turbospec-style,{AA}fixed-kK,{NOSPEC},"
           f"{NIGHTJAR},sidecar-from-quarter")


def expand(raw: str, K: int) -> list[str]:
    """The --policies list: `fixed-k*` is k = 0..K, and a `kK` in a name is K (`aa:fixed-kK`)."""
    out: list[str] = []
    for p in (x.strip() for x in raw.split(",") if x.strip()):
        p = p.replace("fixed-kK", f"fixed-k{K}")
        out += [f"fixed-k{k}" for k in range(K + 1)] if p == "fixed-k*" else [p]
    return list(dict.fromkeys(out))


def with_aa(policies: list[str], K: int) -> list[str]:
    """Every bench measures an A/A: without an `aa:` policy, `aa:fixed-kK` (and its twin) join."""
    if any(p.startswith(AA) for p in policies):
        return policies
    twin = f"fixed-k{K}"
    return [*policies, *([twin] if twin not in policies else []), AA + twin]


def quarter_table(K: int, max_num_seqs: int) -> Table:
    """vLLM's documented table shrunk to a quarter, *then* fitted to the engine: on a 32-seq
    engine that is [[1,16,3],[17,32,1]], where shrinking the fitted [[1,32,3]] would give it back
    unchanged (the same table as fixed-kK)."""
    full = Table.from_list([[s, e, min(k, K)] for s, e, k in DOCUMENTED_RANGES])
    return Table.from_dense(shrink(full).dense(max_num_seqs, K)[1:])


def policy_tables(profile: Profile, policies: Sequence[str] = ()) -> dict[str, Table]:
    """Every table policy this profile allows, plus the `tuned@tie=X` and `aa:P` named."""
    K, n = profile.K, profile.engine.max_num_seqs
    tables = {f"fixed-k{k}": Table.from_list([[1, n, k]]) for k in range(K + 1)}
    tables["documented"] = documented_table(K, n)
    tables["quarter"] = quarter_table(K, n)
    if profile.table:
        tables["tuned"] = Table.from_list(profile.table)
    if profile.acceptance is not None:
        tables["turbospec-style"] = turbospec_table(profile)
    for p in policies:
        if p.startswith(TIE) and profile.acceptance is not None:
            try:
                tie = float(p.removeprefix(TIE))
            except ValueError:
                continue  # reported as unknown by unknown_policies
            tables[p] = profile.model_copy(update={"tie": tie}).build().table
    for p in policies:
        if p.startswith(OTHER):
            tables[p] = _other_table(p.removeprefix(OTHER), K, n)
    for p in policies:
        if p.startswith(AA) and p.removeprefix(AA) in tables:
            tables[p] = tables[p.removeprefix(AA)]
    return tables


def _other_table(path: str, K: int, max_num_seqs: int) -> Table:
    other = load(Path(path))
    if other.table is None:
        raise InvalidInput(f"tuned-of:{path}: that profile has no table yet; finish its tune")
    if (other.K, other.engine.max_num_seqs) != (K, max_num_seqs):
        raise InvalidInput(f"tuned-of:{path}: K={other.K}, max_num_seqs="
                           f"{other.engine.max_num_seqs}, but this profile has K={K}, "
                           f"max_num_seqs={max_num_seqs}; compare tables of the same engine")
    return Table.from_list(other.table)


def unknown_policies(profile: Profile, policies: Sequence[str]) -> list[str]:
    tables = policy_tables(profile, policies)
    known = set(tables) | {p for p in PAIRED if SIDECAR_POLICIES.get(p, "documented") in tables}
    return [p for p in policies if p not in known]


def sidecar_flags(policy: str) -> tuple[str, ...]:
    """A sidecar policy's own flags, after the user's defaults."""
    return ("--dry-run",) if policy.startswith(WATCH) else ()


def start_table(policy: str, tables: dict[str, Table]) -> Table:
    """The table a non-table policy's engine starts from (a sidecar's; the bandit ignores it)."""
    return tables[SIDECAR_POLICIES.get(policy, "documented")]


def engine_args(extra_args: tuple[str, ...]) -> tuple[str, ...]:
    """The bench's vLLM flags: prefix caching off unless an --engine-arg names it. The load cycles
    a fixed prompt set, so from the second round on vLLM's prefix cache would serve nearly every
    prompt and the steps would carry almost no prefill (docs/benchmarks.md, *Settle and
    window*); real prompts do not repeat like that, and the tuner times without the cache too."""
    if any(a.split("=")[0] in ("--enable-prefix-caching", "--no-enable-prefix-caching")
           for a in extra_args):
        return extra_args
    return ("--no-enable-prefix-caching", *extra_args)
