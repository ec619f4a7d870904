"""A self-contained HTML report with SVG line charts (no plotting library needed)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

Point = tuple[float, float]

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 40


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    points: Sequence[Point]
    dashed: bool = False
    markers: bool = False
    labels: Sequence[str] = ()
    """One per point, shown as the marker's tooltip (e.g. the feed a point belongs to)."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]``.

    >>> nice_ticks(0.0, 97.0)
    [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    >>> nice_ticks(0.0, 0.0)
    [0.0, 1.0]
    """
    if high <= low:
        return [low, low + 1.0]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value < high + step * 0.999:
        ticks.append(round(float(value), 10))
        value += step
    return ticks


def _label(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == int(value):
        return str(int(value))
    return f"{value:.1f}"


#: The legend's estimate of a label's width (11 px sans-serif) and its row height.
CHAR_WIDTH, LEGEND_ROW = 6.5, 14.0


def legend_layout(names: Sequence[str]) -> list[tuple[float, float]]:
    """Each legend entry's x and its row's offset below the first row: entries go left
    to right and start a new row where the next would pass the chart's right edge.

    >>> legend_layout(["a" * 40, "b" * 40, "c" * 40])
    [(72.0, 0.0), (356.0, 0.0), (72.0, 14.0)]
    """
    placed: list[tuple[float, float]] = []
    x, row = LEFT + 8.0, 0.0
    for name in names:
        width = 16 + CHAR_WIDTH * len(name)
        if placed and x + width > WIDTH - RIGHT:
            x, row = LEFT + 8.0, row + LEGEND_ROW
        placed.append((x, row))
        x += width + 8
    return placed


def line_chart(
    title: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    x_max: float | None = None,
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """An SVG line chart of ``series`` (x and y from 0 up to their maxima, or ``x_max``),
    with a dashed vertical line and a label at each of ``marks``."""
    points = [p for s in series for p in s.points]
    if x_max is None:
        x_max = max((p[0] for p in points), default=1.0)
    y_max = max((p[1] for p in points), default=1.0)
    x_ticks = nice_ticks(0.0, max(x_max, 1.0))
    y_ticks = nice_ticks(0.0, max(y_max, 1e-9) * 1.05)
    x_hi, y_hi = x_ticks[-1], y_ticks[-1]
    legend = legend_layout([s.name for s in series])
    # Each legend row below the first adds its height above the plot.
    extra = max((y for _, y in legend), default=0.0)
    top, height = TOP + extra, HEIGHT + extra
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - BOTTOM

    def sx(x: float) -> float:
        return LEFT + plot_w * (x / x_hi if x_hi else 0.0)

    def sy(y: float) -> float:
        return top + plot_h * (1 - (y / y_hi if y_hi else 0.0))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for y in y_ticks:
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
            'stroke="#e5e5e5"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{_label(y)}</text>'
        )
    for x in x_ticks:
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - BOTTOM + 16:.0f}" text-anchor="middle">'
            f"{_label(x)}</text>"
        )
    parts.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(0):.1f}" y2="{sy(0):.1f}" stroke="#888"/>'
    )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{height - 6:.0f}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>"
    )
    parts.append(
        f'<text x="14" y="{top + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">{html.escape(y_label)}</text>'
    )
    for x, label in marks:
        parts.append(
            f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top:.0f}" y2="{sy(0):.1f}" '
            'stroke="#999" stroke-dasharray="3,3"/>'
        )
        parts.append(
            f'<text x="{sx(x) + 4:.1f}" y="{top + 14:.0f}" fill="#666">{html.escape(label)}</text>'
        )
    for s, (legend_x, legend_dy) in zip(series, legend, strict=True):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s.points)
        dash = ' stroke-dasharray="5,4"' if s.dashed else ""
        if len(s.points) > 1:
            parts.append(
                f'<polyline fill="none" stroke="{s.color}" stroke-width="2"{dash} points="{path}">'
                f"<title>{html.escape(s.name)}</title></polyline>"
            )
        if s.markers or len(s.points) == 1:
            labels = list(s.labels) or [""] * len(s.points)
            parts.extend(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{s.color}">'
                f"<title>{html.escape(_point_title(s.name, label, x, y))}</title></circle>"
                for (x, y), label in zip(s.points, labels, strict=True)
            )
        legend_y = TOP + legend_dy
        parts.append(
            f'<rect x="{legend_x}" y="{legend_y - 4}" width="12" height="3" fill="{s.color}"/>'
        )
        parts.append(f'<text x="{legend_x + 16}" y="{legend_y}">{html.escape(s.name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _point_title(series: str, label: str, x: float, y: float) -> str:
    """A marker's tooltip: which series, what the point is, and its values.

    >>> _point_title("lag", "shop.orders batch 3", 12.0, 1.25)
    'lag, shop.orders batch 3: 1.2 at 12'
    """
    return f"{series}{', ' + label if label else ''}: {_label(y)} at {_label(x)}"


def report_html(title: str, summary_lines: Sequence[str], charts: Sequence[str]) -> str:
    """A standalone HTML page: the summary (preformatted) and the charts."""
    body = "\n".join(f"<div>{c}</div>" for c in charts)
    summary = html.escape("\n".join(summary_lines))
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:24px;max-width:800px}"
        "pre{background:#f6f6f6;padding:12px;white-space:pre-wrap;overflow-wrap:anywhere}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1><pre>{summary}</pre>{body}</body></html>\n"
    )
