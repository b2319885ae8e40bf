"""Small inline SVG charts for the HTML report (no script, no external asset)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from html import escape

BAR = "#3b6ea8"
MARK = "#c0392b"
MUTED = "#8a99a8"
_MIDDLE = 'text-anchor="middle"'


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1
    for power in range(0, 15):
        for step in (1, 2, 2.5, 5):
            top = step * 10**power
            if top >= value:
                return top
    return value


def bar_chart(
    bars: Sequence[tuple[str, int]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    marked: Collection[str] = (),
    mark_label: str = "",
    width: int = 520,
    height: int = 240,
) -> str:
    """Vertical bars with their value on top; bars whose label is in ``marked`` use the mark colour."""
    left, right, top, bottom = 48, 12, 44 if mark_label else 28, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = _nice_max(max((v for _, v in bars), default=0))
    slot = plot_w / max(len(bars), 1)
    bar_w = max(2.0, slot * 0.7)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="t">{escape(title)}</text>',
    ]
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        value = peak * frac
        label = f"{value:g}" if value < 10_000 else f"{value:,.0f}"
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="a" text-anchor="end">{label}</text>')
    for i, (label, value) in enumerate(bars):
        h = plot_h * value / peak
        x = left + i * slot + (slot - bar_w) / 2
        y = top + plot_h - h
        colour = MARK if label in marked else BAR
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{colour}">'
            f"<title>{escape(label)}: {value:,}</title></rect>"
        )
        if value:
            out.append(f'<text x="{x + bar_w / 2:.1f}" y="{y - 4:.1f}" class="v" {_MIDDLE}>{value:,}</text>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" class="a" {_MIDDLE}>{escape(label)}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="a" {_MIDDLE}>{escape(xlabel)}</text>')
    out.append(
        f'<text x="12" y="{top + plot_h / 2:.1f}" class="a" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">{escape(ylabel)}</text>'
    )
    if mark_label:
        out.append(f'<rect x="{left}" y="23" width="10" height="10" fill="{MARK}"/>')
        out.append(f'<text x="{left + 14}" y="32" class="a">{escape(mark_label)}</text>')
    out.append("</svg>")
    return "".join(out)


def rate_bars(rows: Sequence[tuple[str, float, str]], *, title: str, width: int = 520) -> str:
    """Horizontal bars of a share (0..1) per label, with a note at the end of each bar."""
    label_w, row_h, top = 180, 22, 28
    plot_w = width - label_w - 110
    height = top + row_h * len(rows) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="0" y="16" class="t">{escape(title)}</text>',
    ]
    for i, (label, share, note) in enumerate(rows):
        y = top + i * row_h
        shown = label if len(label) <= 28 else label[:27] + "…"
        out.append(f'<text x="{label_w - 8}" y="{y + 14}" class="a" text-anchor="end">{escape(shown)}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{plot_w}" height="14" fill="#e8edf2"/>')
        out.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{plot_w * min(max(share, 0), 1):.1f}" height="14" fill="{BAR}">'
            f"<title>{escape(label)}: {share:.1%}</title></rect>"
        )
        out.append(f'<text x="{label_w + plot_w + 6}" y="{y + 14}" class="a">{escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)
