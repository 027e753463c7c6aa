"""Markdown pieces: numbers, tables, verdicts, and the Section each
experiment returns."""
from dataclasses import dataclass, field

DASH = "—"


def prose(doc, skip=0):
    """A docstring as markdown paragraphs: the lines of a paragraph joined,
    except in lists ("- " items stay one per line). skip: leading
    paragraphs to leave out (the title line)."""
    out = []
    for para in doc.strip().split("\n\n")[skip:]:
        lines = [l.strip() for l in para.splitlines()]
        if lines and lines[0].startswith("- "):
            items = []
            for l in lines:
                if l.startswith("- ") or not items:
                    items.append(l)
                else:
                    items[-1] += " " + l
            out.append("\n".join(items))
        else:
            out.append(" ".join(lines))
    return out


def num(v, digits=3):
    """A number with `digits` significant digits; a dash for missing."""
    if v is None:
        return DASH
    if isinstance(v, str):
        return v
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}" if a >= 1e-3 else f"{v:.2e}"


def pct(v):
    return DASH if v is None else f"{v:.1f}"


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        out.append("| " + " | ".join(num(c) if not isinstance(c, str) else c for c in r) + " |")
    return "\n".join(out)


def verdict(ok):
    return DASH if ok is None else ("yes" if ok else "**no**")


def all_hold(values):
    """True if every value holds, None if any could not be measured."""
    values = list(values)
    return None if not values or any(v is None for v in values) else all(values)


def checks_table(rows, what="what should carry over", ref="paper"):
    """rows: (claim, reference figure, ours, holds: bool or None)."""
    return table([what, ref, "ours", "holds"],
                 [(c, p if isinstance(p, str) else num(p), o if isinstance(o, str) else num(o),
                   verdict(h)) for c, p, o, h in rows])


@dataclass
class Section:
    name: str                  # the experiment's name (--only), results.json key
    title: str
    body: list = field(default_factory=list)      # markdown paragraphs and tables
    data: dict = field(default_factory=dict)      # what goes into results.json
    plots: list = field(default_factory=list)     # PNG file names in the out dir
    headline: list = field(default_factory=list)  # one-line findings for the summary
    extra: dict = field(default_factory=dict)     # more top-level keys of results.json

    def add(self, *parts):
        self.body.extend(parts)

    def plot(self, name):
        """Adds a plot file (None: none was drawn, matplotlib missing)."""
        if name:
            self.plots.append(name)

    def markdown(self):
        parts = [f"## {self.title}", *self.body]
        parts += [f"![{p}]({p})" for p in self.plots]
        return "\n\n".join(parts)
