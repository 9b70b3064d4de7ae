"""The pure half of the side-by-side harness: summaries, per-round ratios, targets and the
Markdown table. No I/O here, so that a unit test can keep it honest."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation): a value that was really observed."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


def round_ratios(ours: Sequence[float], peer: Sequence[float]) -> list[float]:
    """ours[i] / peer[i] for every round where both sides have a figure."""
    if len(ours) != len(peer) or not ours:
        raise ValueError("one value per round on each side")
    # A round where a side has no figure (NaN: every call of it failed) gives no ratio.
    ratios = [a / b for a, b in zip(ours, peer, strict=True) if b > 0 and not math.isnan(a + b)]
    if not ratios:
        raise ValueError("no round has a figure on both sides")
    return ratios


def median_of_round_ratios(ours: Sequence[float], peer: Sequence[float]) -> float:
    """The median of ours[i] / peer[i]: each round's ratio is taken under that round's load, so
    a noisy round moves one ratio rather than both medians."""
    return statistics.median(round_ratios(ours, peer))


@dataclass(frozen=True)
class Target:
    """What a row must reach: `kind` is `ratio_le`, `ratio_ge` (against the peer) or `abs_le`
    (shellgate's own figure, in the row's unit)."""

    kind: str
    value: float

    def holds(self, ours: float, ratio: float | None) -> bool:
        if self.kind == "abs_le":
            return ours <= self.value
        if ratio is None:
            return False  # fail closed: no peer figure, no claim
        if self.kind == "ratio_le":
            return ratio <= self.value
        if self.kind == "ratio_ge":
            return ratio >= self.value
        raise ValueError(f"unknown target kind {self.kind}")

    def text(self, peer: str) -> str:
        if self.kind == "abs_le":
            return f"≤ {self.value:g}"
        sign = "≤" if self.kind == "ratio_le" else "≥"
        return f"{sign} ×{self.value:g} {peer}"


@dataclass
class Row:
    """One line of the table: per-round figures of shellgate and of each peer (same length)."""

    work: str
    unit: str
    ours: list[float]
    peers: dict[str, list[float]] = field(default_factory=dict)
    # Which peer the ratio and the target are taken against (None: no ratio).
    against: str | None = None
    target: Target | None = None
    # Extra per-subject text, e.g. a p99 beside the median.
    notes: dict[str, str] = field(default_factory=dict)

    def ratio(self) -> float | None:
        if self.against is None or not self.peers.get(self.against):
            return None
        try:
            return median_of_round_ratios(self.ours, self.peers[self.against])
        except ValueError:
            return None

    def spread(self) -> tuple[float, float] | None:
        """The lowest and highest per-round ratio: how far one round can be from the median."""
        if self.against is None or not self.peers.get(self.against):
            return None
        try:
            ratios = round_ratios(self.ours, self.peers[self.against])
        except ValueError:
            return None
        return min(ratios), max(ratios)

    def holds(self) -> bool | None:
        if self.target is None:
            return None
        ours = [value for value in self.ours if not math.isnan(value)]
        if not ours:
            return False  # fail closed: no figure, no claim
        return self.target.holds(statistics.median(ours), self.ratio())

    def as_json(self) -> dict[str, object]:
        return {
            "work": self.work,
            "unit": self.unit,
            "shellgate_rounds": self.ours,
            "peers_rounds": self.peers,
            "against": self.against,
            "ratio": self.ratio(),
            "ratio_spread": self.spread(),
            "target": None if self.target is None else [self.target.kind, self.target.value],
            "holds": self.holds(),
            "notes": self.notes,
        }


def figure(values: Sequence[float], unit: str) -> str:
    known = [value for value in values if not math.isnan(value)]
    if not known:
        return "— (no figure)"
    value = statistics.median(known)
    digits = 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1 if abs(value) < 1000 else 0
    return f"{value:,.{digits}f} {unit}"


def render(rows: Sequence[Row]) -> str:
    """Markdown: the medians over rounds, the peers, the median per-round ratio with the lowest
    and highest round's in brackets, the target."""
    lines = [
        "| work | shellgate | peers | ratio | target | holds |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours = figure(row.ours, row.unit)
        if note := row.notes.get("shellgate"):
            ours += f" ({note})"
        peers = "; ".join(
            f"{name} {figure(values, row.unit)}"
            + (f" ({row.notes[name]})" if name in row.notes else "")
            for name, values in row.peers.items()
            if values
        )
        ratio = row.ratio()
        ratio_text = "—" if ratio is None else f"×{ratio:.2f} {row.against}"
        if (spread := row.spread()) is not None and spread[0] != spread[1]:
            ratio_text += f" (×{spread[0]:.2f}–{spread[1]:.2f})"
        target = "—" if row.target is None else row.target.text(row.against or "")
        holds = row.holds()
        holds_text = "—" if holds is None else "yes" if holds else "no"
        lines.append(
            f"| {row.work} | {ours} | {peers or '—'} | {ratio_text} | {target} | {holds_text} |"
        )
    return "\n".join(lines) + "\n"
