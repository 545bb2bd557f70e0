"""Charts as SVG written on the server (no script, no CDN): horizontal bars, one per group, each
labelled with its value. Every label passes through escaping."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

ROW = 22
LABEL = 170
BAR = 360
VALUE = 110


def bars(title: str, rows: Sequence[tuple[str, float]], unit: str = "", digits: int = 0) -> Markup:
    """A bar per ``(label, value)`` (longest = the largest value), titled, with the value written."""
    if not rows:
        return Markup('<p class="muted">{}: nothing in this period.</p>').format(title)
    top = max(v for _, v in rows) or 1.0
    height = ROW * len(rows) + 8
    width = LABEL + BAR + VALUE
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
             f'preserveAspectRatio="xMinYMin meet" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>"]
    for i, (label, value) in enumerate(rows):
        y = 4 + i * ROW
        length = max(1.0, BAR * value / top) if value else 0.0
        shown = f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"
        parts.append(f'<text x="{LABEL - 6}" y="{y + 15}" text-anchor="end" class="chart-label">'
                     f"{escape(label[:28])}</text>")
        parts.append(f'<rect x="{LABEL}" y="{y + 3}" width="{length:.1f}" height="{ROW - 6}" rx="2" '
                     f'class="chart-bar"><title>{escape(label)}: {escape(shown)}</title></rect>')
        parts.append(f'<text x="{LABEL + length + 6:.1f}" y="{y + 15}" class="chart-value">'
                     f"{escape(shown)}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
