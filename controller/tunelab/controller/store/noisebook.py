"""The store's noise profiles (migration 12, ``0012_launch_cost_noise_profile.sql``): one row
per host class x engine x model, replaced whole as a search ends (tunelab.analysis.noise pools
the search into it first). Held by ``core.SqlStore`` as its other books are (books.py), built
once per dialect, run on the store's engine (engine.py)."""

from __future__ import annotations

from typing import Protocol

from tunelab.analysis.noise import NoiseProfile, ProfileKey
from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine

COLUMNS = (
    "host_class, engine, model, between_var, within_var, df_between, df_within, searches, "
    "updated_at"
)


class NoiseStore(Protocol):
    """What the noise profile needs of the store, beside :class:`Store`."""

    def noise_profile(self, key: ProfileKey) -> NoiseProfile | None: ...
    def put_noise_profile(self, profile: NoiseProfile, now: float) -> None: ...


class NoiseSql:
    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        where = f"host_class = {p} AND engine = {p} AND model = {p}"
        self.one = f"SELECT {COLUMNS} FROM noise_profiles WHERE {where}"
        self.delete = f"DELETE FROM noise_profiles WHERE {where}"
        self.insert = f"INSERT INTO noise_profiles ({COLUMNS}) VALUES ({dialect.marks(9)})"


class NoiseStatements:
    def __init__(self, engine: Engine, sql: NoiseSql) -> None:
        self._engine = engine
        self.noise_sql = sql

    def noise_profile(self, key: ProfileKey) -> NoiseProfile | None:
        rows = self._engine._query(self.noise_sql.one, (key.host_class, key.engine, key.model))
        if not rows:
            return None
        r = rows[0]
        return NoiseProfile(
            key,
            float(r["between_var"]),
            float(r["within_var"]),
            float(r["df_between"]),
            float(r["df_within"]),
            int(r["searches"]),
        )

    def put_noise_profile(self, profile: NoiseProfile, now: float) -> None:
        """Replace the key's profile (one transaction: a reader sees the old or the new)."""
        k = profile.key
        with self._engine._tx() as conn:
            conn.execute(self.noise_sql.delete, (k.host_class, k.engine, k.model))
            conn.execute(
                self.noise_sql.insert,
                (
                    k.host_class,
                    k.engine,
                    k.model,
                    profile.between,
                    profile.within,
                    profile.df_between,
                    profile.df_within,
                    profile.searches,
                    now,
                ),
            )
