"""The engine's DSD table as the sidecar knows it, and every call to the plugin's admin API.

It remembers what the last admin call said (the engine's table and version, and when the
endpoint last answered), what the sidecar wants the engine to run (``desired``), and applies
the rule for a table someone else wrote.

Foreign table: the engine's table version moved without a push of ours, and its table is
neither the one we want nor the one it ran before (e.g. an operator's ``PUT /v1/table``; the
same table written again is not one). Seen on every scrape (the plugin's
``tabletune_table_version``, confirmed with ``GET /v1/table``) and at every rebuild. The
sidecar logs one ``foreign_table`` event, then for ``foreign_hold_s`` seconds only recommends
(rebuild outcome ``held``: dry-run behaviour); when the hold is over it logs
``foreign_table_hold_ended`` and the next rebuild pushes its table again. Another foreign
change starts the hold again; an engine restart ends it (the foreign table went with the old
run). ``foreign_hold_s=0`` reasserts the sidecar's table at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

from sidecar import profile_fit
from sidecar.checkpoint import SavedTable
from sidecar.decision import Outcome
from sidecar.logs import Conditions
from sidecar.counters import Stats
from sidecar.settings import SidecarSettings
from tuner.core.admin_api import Duel, TableReply
from tuner.core.engine_client import AdminRejected, EngineClient
from tuner.core.errors import EngineUnavailable
from tuner.core.profile import Profile
from tuner.core.table import Table

__all__ = ["EngineTable"]

log = logging.getLogger("sidecar")
R = TypeVar("R")


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


class EngineTable:
    def __init__(self, settings: SidecarSettings, profile: Profile, client: EngineClient,
                 conditions: Conditions, stats: Stats, clock: Callable[[], float]) -> None:
        self.settings, self.profile, self.client = settings, profile, client
        self.conditions, self.stats, self.clock = conditions, stats, clock
        self._info: TableReply | None = None  # the engine's table, as last read or pushed
        self.table: Table | None = None  # its table parsed, once per reply
        self.has_admin = False  # an admin endpoint answered at start
        self.is_connected = False
        self.desired: Table | None = None  # what we want the engine to run
        self.needs_sync = False
        self.last_ok_at: float | None = None  # when the admin endpoint last answered
        self.hold_until: float | None = None
        self.hold_version: int | None = None
        self.duels: tuple[Duel, ...] = ()  # asked of the plugin
        self.urgent = False  # at urgent_share (sidecar/arbiter.py)
        self.duels_sent = False  # ever: then an empty list must be sent to end them
        self.rotation: tuple[int, ...] = ()  # the k's the rotation visits (): every runnable k

    @property
    def info(self) -> TableReply | None:
        return self._info

    @info.setter
    def info(self, reply: TableReply | None) -> None:
        self._info, self.table = reply, None if reply is None else reply.parsed_table()

    @property
    def version(self) -> int | None:
        return None if self._info is None else self._info.version

    def wanted(self) -> SavedTable | None:
        """The table we want the engine to run, and the engine's version while it runs it."""
        if self.desired is None:
            return None
        return SavedTable(self.desired, self.version if self.table == self.desired else None)

    # -- every admin call after the start goes through here ------------------------------
    async def _call(self, call: Awaitable[R], doing: str) -> R:
        """Await an admin call; record when the endpoint answered, or the condition if not."""
        try:
            result = await call
        except AdminRejected:
            self._answered()  # a 4xx: the endpoint is up, it refused this request
            raise
        except EngineUnavailable as exc:
            self.stats.failed("admin_unavailable")
            self.conditions.set("admin", "unavailable", "the plugin's admin endpoint does not "
                                f"answer ({doing})", error=str(exc))
            raise
        self._answered()
        return result

    def _answered(self) -> None:
        self.last_ok_at = self.clock()
        self.conditions.ok("admin", "the plugin's admin endpoint answers again")

    # -- start -----------------------------------------------------------------------------
    async def connect(self) -> bool:
        """Read the engine's table, check the profile against it, set the plugin's policy."""
        try:
            info: TableReply | None = await self.client.get_table()
        except EngineUnavailable as exc:
            if not self.settings.dry_run:
                self.stats.failed("admin_unavailable")
                self.conditions.set("admin", "unavailable", "waiting for the plugin's admin "
                                    "endpoint", error=str(exc))
                return False
            self.conditions.set("admin", "absent", "no admin endpoint: dry-run reads vLLM's "
                                "stock counters only", logging.INFO, error=str(exc))
            info = None
        else:
            self._answered()
        profile_fit.check(self.profile, info, None, self.settings.model_name)
        if info is not None:
            await self._check_served_name()
        if info is not None and not self.settings.dry_run and not await self.put_policy():
            return False
        self.info, self.has_admin, self.is_connected = info, info is not None, True
        return True

    async def _check_served_name(self) -> None:
        """--model-name against the name the engine serves (the plugin's /v1/stats)."""
        try:
            served = (await self.client.get_stats()).model_name
        except EngineUnavailable as exc:  # the scrape's own error names it too
            log.warning("cannot read the engine's served model name; not checking "
                        "--model-name", extra={"error": str(exc)})
            return
        if served != "unknown":  # a plugin that predates the field
            profile_fit.check_served_name(self.settings.model_name, served)

    def policy_fields(self) -> dict[str, object]:
        """The policy this sidecar keeps in the engine: the rotation from the settings over the
        k's its last rebuild left it (sidecar/arbiter.rotation_ks; every runnable k at first, so
        an earlier sidecar's subset goes), and the duels that rebuild asked for (while any is
        set, the plugin runs them instead of the rotation)."""
        s = self.settings
        # the budget always: the rotation is charged to it too, and the plugin may hold an
        # earlier sidecar's
        share = max(s.explore_share, s.urgent_share) if self.urgent and self.duels else s.explore_share
        fields: dict[str, object] = {"explore_every": s.explore_every,
                                     "explore_run": s.explore_run, "hysteresis": s.hysteresis,
                                     "duel_share": share, "duel_horizon": s.explore_horizon,
                                     "explore_ks": list(self.rotation)}
        if self.duels or self.duels_sent:
            fields |= {"duels": [[lo, hi, list(ks)] for lo, hi, ks in self.duels],
                       "duel_run": s.duel_run}
        return fields

    async def set_exploration(self, duels: tuple[Duel, ...], urgent: bool = False,
                              rotation: tuple[int, ...] = ()) -> None:
        """Ask the plugin for these duels, at urgent_share if ``urgent``, and a rotation over
        ``rotation``'s k's (() every runnable k); nothing in dry-run, or when already set."""
        if ((duels, urgent, rotation) == (self.duels, self.urgent, self.rotation)
                or self.settings.dry_run or not self.has_admin):
            return
        before = self.duels, self.urgent, self.rotation
        self.duels, self.urgent, self.rotation = duels, urgent, rotation
        self.duels_sent = self.duels_sent or duels != before[0]
        try:
            await self._call(self.client.put_policy(**self.policy_fields()), "setting the duels")
        except EngineUnavailable as exc:  # AdminRejected included: the next rebuild asks again
            self.duels, self.urgent, self.rotation = (), False, before[2]
            log.warning("duels not set; the plugin keeps its exploration",
                        extra={"error": str(exc)})
        else:
            log.info("duels", extra={"duels": [[lo, hi, list(ks)] for lo, hi, ks in duels],
                                     "share": self.policy_fields()["duel_share"],
                                     "rotation": list(rotation)})

    async def put_policy(self) -> bool:
        try:
            await self._call(self.client.put_policy(**self.policy_fields()), "setting the policy")
        except AdminRejected as exc:
            self.stats.failed("policy_rejected")
            log.error("policy rejected; the engine keeps its own", extra={"error": str(exc)})
        except EngineUnavailable:
            return False
        return True  # a 4xx will not change on retry: carry on without it

    # -- reading the table: a version we did not write is a foreign table -------------------
    async def read(self) -> TableReply | None:
        """The engine's current table (fresh), None without the admin endpoint or on error."""
        if not self.has_admin:
            return None
        try:
            fresh = await self._call(self.client.get_table(), "reading the engine's table")
        except EngineUnavailable:
            return None
        self._seen(fresh)
        return fresh

    async def current(self) -> TableReply | None:
        """The table a push is conditional on: the one each tick's ``watch`` keeps current (read
        only when none is known yet); the PUT's ``if_version`` catches a write since then."""
        return self.info if self.info is not None else await self.read()

    async def watch(self, version: int | None) -> None:
        """A table version on /metrics other than the one we know: read the table."""
        if self.has_admin and version is not None and self.info is not None \
                and version != self.info.version:
            with contextlib.suppress(EngineUnavailable):
                await self.read()

    def _seen(self, fresh: TableReply) -> None:
        known, self.info = self.info, fresh
        if known is None or fresh.version == known.version:
            return
        if self.desired is not None and self.table == self.desired:
            return  # ours after all (a push whose reply was lost)
        if fresh.parsed_table() == known.parsed_table():
            return  # the same table written again (a config reconcile): nothing else runs
        self._foreign(known, fresh)

    def _foreign(self, known: TableReply, fresh: TableReply) -> None:
        self.stats.foreign_table()
        hold_s = self.settings.foreign_hold_s
        if self.settings.dry_run:
            action = "dry-run: the sidecar never writes, nothing to hold"
        elif hold_s > 0:
            self.hold_until, self.hold_version = self.clock() + hold_s, fresh.version
            self.needs_sync = False
            action = (f"recommending only until {iso(self.hold_until)} "
                      f"(foreign_hold_s={hold_s:g}), then pushing again")
        else:
            self.needs_sync = self.desired is not None
            action = ("reasserting our table now (foreign_hold_s=0)" if self.needs_sync else
                      "no table of ours yet: the next rebuild decides")
        log.warning("foreign_table", extra={"foreign_table": {
            "known_version": known.version, "version": fresh.version, "table": fresh.table,
            "ours": self.desired.to_list() if self.desired is not None else None,
            "hold_until": self.hold_until, "action": action}})

    def resume(self, saved: SavedTable) -> None:
        """At start, the table a checkpoint says we wanted: ours again if the engine runs it;
        re-pushed at once if the engine restarted since (its versions count from 1 again);
        else someone else wrote the engine's table while we were down: the foreign rule."""
        self.desired = saved.table
        info = self.info
        if info is None or self.settings.dry_run or self.table == saved.table:
            return
        if saved.version is not None and info.version < saved.version:
            self.needs_sync = True
            log.info("checkpointed table restored", extra={
                "table": saved.table.to_list(), "engine_table": info.table,
                "action": "the engine restarted since: pushing our table again"})
            return
        known = info.model_copy(update={"version": saved.version if saved.version is not None
                                        else info.version, "table": saved.table.to_list()})
        self._foreign(known, info)

    # -- the hold ------------------------------------------------------------------------------
    def holding(self) -> bool:
        return self.hold_until is not None and self.clock() < self.hold_until

    def check_hold(self) -> None:
        """Say once that a hold is over: the next rebuild pushes again."""
        if self.hold_until is not None and not self.holding():
            self._end_hold("the hold is over: pushing again from the next rebuild")

    def _end_hold(self, action: str) -> None:
        log.info("foreign_table_hold_ended", extra={"version": self.hold_version,
                                                    "action": action})
        self.hold_until = self.hold_version = None

    def restarted(self) -> None:
        """A new engine run: our policy and table go back in; a hold ends with the old run."""
        self.needs_sync = self.has_admin
        if self.hold_until is not None:
            self._end_hold("the engine restarted: the foreign table went with it")

    # -- writing -----------------------------------------------------------------------------
    async def sync(self) -> None:
        """After an engine restart or a failed push: policy and table back into the engine."""
        try:
            info = await self._call(self.client.get_table(), "reading the engine's table")
            diffs = profile_fit.mismatches(self.profile, info, None, None)
            if diffs:
                self.needs_sync = False
                log.error("the restarted engine does not match the profile; not pushing",
                          extra={"differences": diffs})
                return
            await self._call(self.client.put_policy(**self.policy_fields()), "setting the policy")
            if (self.desired is not None and info.parsed_table() != self.desired
                    and not self.holding()):
                info = await self._call(self.client.put_table(self.desired, if_version=info.version),
                                        "pushing the table")
                self.stats.pushed()
                log.info("table re-pushed", extra={"table": info.table, "version": info.version})
            self.info, self.needs_sync = info, False
            self.conditions.ok("sync", "the engine runs our table and policy again")
        except AdminRejected as exc:
            self.needs_sync = False
            if exc.status == 409 and exc.field == "if_version":  # written since we read it
                await self.read()  # ours (a retry whose first try landed), else the foreign rule
                return
            self.stats.failed("push_rejected")
            log.error("re-push rejected", extra={"error": str(exc)})
        except EngineUnavailable as exc:
            self.stats.failed("push_failed")
            self.conditions.set("sync", "pending", "cannot re-push yet; retrying next tick",
                                error=str(exc))

    async def push(self, new: Table, fresh: TableReply | None) -> tuple[Outcome, str]:
        """Write ``new`` unless dry-run, already running, or holding off; outcome and reason."""
        current = self.table if fresh is not None else None  # read() parsed it
        if self.settings.dry_run:
            same = "; the engine already runs it" if current == new else ""
            return "dry_run", f"dry-run: recommended only, nothing written to the engine{same}"
        if fresh is not None and current == new:
            self.desired = new
            return "unchanged", f"the engine already runs this table (v{fresh.version})"
        if self.holding() and self.hold_until is not None:
            return "held", (f"someone else wrote the engine's table (v{self.hold_version}): "
                            f"recommended only until {iso(self.hold_until)} "
                            f"(foreign_hold_s={self.settings.foreign_hold_s:g})")
        try:
            self.info = await self._call(self.client.put_table(
                new, if_version=None if fresh is None else fresh.version), "pushing the table")
        except AdminRejected as exc:
            if exc.status == 409 and exc.field == "if_version":  # written between read and PUT
                self.desired = new  # a retry whose first try landed finds our own table
                fresh_now = await self.read()  # else the foreign-table rule takes it from here
                if fresh_now is not None and self.table == new:
                    self.stats.pushed()
                    return "pushed", f"engine table -> v{fresh_now.version} (its reply was lost)"
                return "held", f"someone else wrote the engine's table after we read it: {exc.error}"
            self.stats.failed("push_rejected")
            return "rejected", str(exc)
        except EngineUnavailable as exc:
            self.stats.failed("push_failed")
            self.desired, self.needs_sync = new, True
            return "failed", f"{exc}; the engine keeps its table, the push is retried"
        self.stats.pushed()
        self.desired = new
        before = f"v{fresh.version}" if fresh is not None else "unknown"
        return "pushed", f"engine table {before} -> v{self.info.version}"
