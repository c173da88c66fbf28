#!/usr/bin/env python3
"""Usage: check_completion.py PROGRAM COMPLETION_SCRIPT

Fails, naming what is missing, when the static bash completion of PROGRAM
(hzctl or hz) does not offer a subcommand or an option that PROGRAM's own
--help lists, at any depth, or when bash cannot parse the script. The
completion is run as bash runs it: the script is sourced and its function
called with COMP_WORDS set to the command line being completed.
"""
import os
import re
import subprocess
import sys


def help_sections(program, path):
    """The subcommand names and long options `PROGRAM PATH... --help` lists."""
    env = {k: v for k, v in os.environ.items() if k not in ("HZ_CONTROL_SOCKET", "HZ_DEVICE")}
    out = subprocess.run([program, *path, "--help"], capture_output=True, text=True, env=env,
                         timeout=30, check=True).stdout
    subcommands, options, section = [], [], None
    for line in out.splitlines():
        if re.match(r"^\S.*:$", line):
            section = line[:-1]
            continue
        if not line.startswith("  ") or line.startswith("    "):
            continue
        first = line.split()[0]
        if section == "Subcommands":
            subcommands.append(first)
        elif section == "Options":
            options += re.findall(r"--[\w-]+", first)
    return subcommands, options


def offered(script, function, words):
    """What the completion offers for the command line `words` (last: the
    word being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    code = (f"source '{script}'; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
            f"{function}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or out.stderr:
        sys.exit(f"completion failed for {words}: {out.stderr}")
    return set(out.stdout.split())


def main():
    program, script = sys.argv[1], sys.argv[2]
    name = os.path.basename(program)
    function = "_" + name
    syntax = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    if syntax.returncode != 0:
        sys.exit(f"bash -n {script}: {syntax.stderr}")
    missing, checked = [], 0
    pending = [[]]
    while pending:
        path = pending.pop()
        subcommands, options = help_sections(program, path)
        if subcommands:
            have = offered(script, function, [name, *path, ""])
            for s in subcommands:
                checked += 1
                if s not in have:
                    missing.append(f"subcommand {' '.join([name, *path, s])}")
            pending += [path + [s] for s in subcommands]
        have = offered(script, function, [name, *path, "--"])
        for o in options:
            checked += 1
            if o not in have:
                missing.append(f"option {o} of {' '.join([name, *path])}")
    if missing:
        sys.exit(f"{script} does not offer what --help lists:\n  " + "\n  ".join(missing))
    if checked < 5:
        sys.exit(f"only {checked} subcommands and options found in {name} --help: parsing broke?")
    print(f"{name}: the completion offers all {checked} subcommands and options of --help")


if __name__ == "__main__":
    main()
