"""What `sovia --help` and its commands' --help texts name: the commands,
a command's --options, a heading's entries (shared by the manual page and
completion tests, which check those against the help)."""
import re
import subprocess


def help_text(sovia, *args):
    return subprocess.run([sovia, *args, "--help"], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def section(text, heading):
    """The first words of the lines under `heading` up to a blank line."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    out = []
    for line in lines[start:]:
        if not line.strip():
            break
        out.append(line.split()[0])
    return out


def commands(sovia):
    return section(help_text(sovia), "commands:")


def options(sovia, *args):
    return sorted(set(re.findall(r"--[a-z][a-z0-9-]*", help_text(sovia, *args))))
