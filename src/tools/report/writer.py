"""REPORT.md and results.json from the experiments' sections."""
import json
import os

from . import sysinfo

INTRO = """Every experiment of the SOVIA papers, measured on this machine by `{command}`.
Each table puts the papers' published figures (2001-2007 hardware: Giganet cLAN and
M-VIA, Pentium III/4, Linux 2.2/2.4) beside ours. Absolute microseconds do not carry
over from a 1.25 Gb/s NIC to shared memory; the ratios and shapes should, and each
section ends with the ones that should carry over and whether they do here.

How: {rounds} interleaved round(s) of every run ({mode} mode); a value is the median
over rounds of each run's own median (`sovia bench` reports the p50 of its batches);
a ratio is the median of the per-round ratios, both runs from the same round.
Polling runs pin the two processes to different cores. Wall time {wall}.
Machine: {machine}; load average {load}.
"""


def write(out, meta, sections, store, paper_figures, no_plots_why):
    plots = [p for s in sections for p in s.plots]
    md = [f"# sovia report ({meta['mode']})",
          INTRO.format(command=meta["command"], rounds=meta["rounds"], mode=meta["mode"],
                       wall=f"{meta['wall_seconds'] / 60:.1f} minutes",
                       machine=sysinfo.one_line(meta),
                       load=f"{meta['load_average_start']} at the start, "
                            f"{meta['load_average_end']} at the end (the report's own "
                            "runs, two busy processes at a time, raise it)").strip()]
    # Only the start says something about other load: by the end the
    # 1-minute average counts the report's own polling pairs.
    if meta["load_average_start"] > 0.5 * meta["cpus_allowed"]:
        md.append("**The machine was busy** (load average above half its CPUs): other "
                  "processes took CPU time from the measured ones, polling runs above all. "
                  "Treat these numbers as indicative; rerun on a quiet machine.")
    if meta.get("stripped_env"):
        md.append("Not passed on to the measured programs (they would change what is "
                  "measured): " + ", ".join(f"`{v}`" for v in meta["stripped_env"]) + ".")
    if no_plots_why:
        md.append(f"No plots: matplotlib is not usable here ({no_plots_why}); "
                  "install Debian's python3-matplotlib.")
    heads = [h for s in sections for h in s.headline]
    if heads:
        md.append("## Summary\n\n" + "\n".join(f"- {h}" for h in heads))
    md += [s.markdown() for s in sections]
    if store.errors:
        md.append("## Runs that failed\n\n" + "\n".join(
            f"- {label}: {msg}" for label, msg in store.errors))
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n\n".join(md) + "\n")

    results = {"meta": meta, "summary": heads}
    for s in sections:
        results[s.name] = s.data
        results.update(s.extra)
    results.update(plots=plots, errors=[{"run": l, "error": m} for l, m in store.errors],
                   paper=paper_figures, raw=store.dump())
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
        f.write("\n")
