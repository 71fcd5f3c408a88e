"""The context-tokens chart as SVG geometry (the template draws it; no script)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxwarden.service.console import ContextSeries

WIDTH, HEIGHT, PAD = 800.0, 160.0, 4.0


@dataclass(frozen=True, slots=True)
class Mark:
    x: float
    seq: int
    superseded: bool = False


@dataclass(frozen=True, slots=True)
class Column:
    """A clickable column of the chart: jumps the timeline to ``seq``."""

    x: float
    width: float
    seq: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Chart:
    line: str
    """The polyline's points."""
    compactions: list[Mark]
    rollbacks: list[Mark]
    columns: list[Column]
    threshold_y: float
    window_y: float
    peak: int
    last_seq: int
    empty: bool


def chart(series: ContextSeries, threshold: int, window: int) -> Chart:
    points = series.points
    if not points:
        return Chart("", [], [], [], 0.0, 0.0, 0, 0, True)
    last_seq = points[-1].seq
    # Scaled to the data; the threshold and the window are drawn when the data comes near.
    top = max(p.tokens for p in points)
    peak = max(int(top * 1.15), 1)
    for level in (threshold, window):
        if level and level <= 2 * top:
            peak = max(peak, int(level * 1.05))

    def x(seq: float) -> float:
        return round(PAD + (WIDTH - 2 * PAD) * seq / max(last_seq, 1), 2)

    def y(tokens: float) -> float:
        return round(HEIGHT - PAD - (HEIGHT - 2 * PAD) * tokens / peak, 2)

    line = " ".join(f"{x(p.seq)},{y(p.tokens)}" for p in points)
    step = (WIDTH - 2 * PAD) / len(points)
    columns = [
        Column(round(PAD + i * step, 2), round(step, 2), max(1, p.seq - series.width + 1), p.tokens)
        for i, p in enumerate(points)
    ]
    return Chart(
        line,
        [Mark(x(seq), seq, superseded) for seq, superseded in series.compactions],
        [Mark(x(p.seq), p.seq) for p in points if p.rolled_back],
        columns,
        y(threshold) if threshold and threshold <= peak else 0.0,
        y(window) if window and window <= peak else 0.0,
        peak,
        last_seq,
        False,
    )
