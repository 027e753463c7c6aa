"""PNG plots with matplotlib (Debian's python3-matplotlib). Without it the
report is written without plots and says so; nothing else depends on it."""
import os

_plt = None
_why = None


def available():
    """Whether matplotlib can be used (imported once, headless backend)."""
    global _plt, _why
    if _plt is None and _why is None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            _plt = plt
        except Exception as e:  # ImportError, or a broken installation
            _why = f"{type(e).__name__}: {e}"
    return _plt is not None


def why_not():
    return _why


def _save(fig, out, name):
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    _plt.close(fig)
    return name


def _series(ax, series):
    for s in series:
        pts = [(x, y) for x, y in zip(s["x"], s["y"]) if y is not None and y > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], s.get("style", "o-"),
                    label=s["label"], markersize=3)


def lines(out, name, title, xlabel, ylabel, series, logx=True, logy=True, right=None):
    """One or two panels of lines. series: [{"label", "x", "y", "style"?}];
    right: (title, ylabel, series, logy) for a second panel. Returns the file
    name, or None without matplotlib or data."""
    if not available() or not any(any(y for y in s["y"] if y) for s in series):
        return None
    fig, axes = _plt.subplots(1, 2 if right else 1, figsize=(11 if right else 6.5, 4.2))
    axes = list(axes) if right else [axes]
    panels = [(title, ylabel, series, logy)] + ([right] if right else [])
    for ax, (t, yl, ser, ly) in zip(axes, panels):
        _series(ax, ser)
        ax.set_title(t, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(yl)
        if logx:
            ax.set_xscale("log", base=2)
        if ly:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, out, name)


def table_lines(out, name, title, ylabel, table, xlabel="message size (bytes)", **kw):
    """lines() of a table {label: {x: y}}."""
    series = [{"label": k, "x": list(v), "y": list(v.values())} for k, v in table.items()]
    return lines(out, name, title, xlabel, ylabel, series, **kw)


def cpu_bars(out, name, title, groups):
    """Stacked user/kernel bars. groups: [(label, user %, kernel %)]."""
    if not available() or not groups:
        return None
    fig, ax = _plt.subplots(figsize=(max(6.5, 0.45 * len(groups)), 4.2))
    xs = range(len(groups))
    user = [g[1] or 0 for g in groups]
    kern = [g[2] or 0 for g in groups]
    ax.bar(xs, kern, color="black", label="kernel")
    ax.bar(xs, user, bottom=kern, color="0.65", label="user")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([g[0] for g in groups], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of one core")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, out, name)
