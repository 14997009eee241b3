"""Small frozen records for ``stats()``: a distribution summary and a two-column text table."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

# The percentiles a Distribution reports.
_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Distribution:
    """Summary of per-unit counts (tiles per window, blocks per block row, work per item)."""

    min: int
    p50: float
    p90: float
    p99: float
    max: int
    mean: float
    count: int  # how many units were summarized

    @classmethod
    def of(cls, counts: np.ndarray) -> "Distribution":
        if counts.size == 0:
            return cls(min=0, p50=0.0, p90=0.0, p99=0.0, max=0, mean=0.0, count=0)
        p50, p90, p99 = (float(p) for p in np.percentile(counts, _PERCENTILES))
        return cls(min=int(counts.min()), p50=p50, p90=p90, p99=p99, max=int(counts.max()),
                   mean=float(counts.mean()), count=int(counts.size))

    def __str__(self) -> str:
        return (f"min {self.min}, p50 {self.p50:g}, p90 {self.p90:g}, p99 {self.p99:g}, "
                f"max {self.max}, mean {self.mean:.3g} (over {self.count})")


class StatsRecord:
    """Mixin for the stats dataclasses: ``as_dict()`` and a readable ``__str__`` table."""

    _title = "stats"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        rows = [(f.name, _fmt(getattr(self, f.name))) for f in dataclasses.fields(self)]
        width = max(len(name) for name, _ in rows)
        return "\n".join([self._title] + [f"  {name:<{width}}  {value}" for name, value in rows])


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
