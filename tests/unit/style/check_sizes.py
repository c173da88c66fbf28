#!/usr/bin/env python3
"""Usage: check_sizes.py SOURCE_ROOT DIR [DIR...]

Fails, naming them, when a tracked C/C++ file under one of the DIRs is longer
than 500 lines or holds a function longer than 80 lines (from the line of
its name to its closing brace). Small files and functions are a rule of the
project; this keeps the rule true where it has been applied.
"""
import re
import string
import subprocess
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def strip(text):
    """Blanks out comments and string/char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and 0 < i < n - 1 and text[i - 1] in string.hexdigits and \
                text[i + 1] in string.hexdigits:
            # A digit separator (10'000), not a character literal.
            out.append(c)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (name, first line, last line) of every function body at
    namespace or class scope."""
    code = strip(text)
    # Per open brace: ("scope",) for a namespace, class or extern block,
    # ("function", name, line), ("init",) for a member's brace initializer
    # in a constructor's init list, or ("other",).
    scopes = []
    header_start = 0  # where the text before the next brace begins
    for m in re.finditer(r"[{};]", code):
        pos, ch = m.start(), m.group()
        if ch == ";":
            header_start = pos + 1
            continue
        if ch == "}":
            kind = scopes.pop() if scopes else ("scope",)
            if kind[0] == "function":
                yield kind[1], kind[2], code.count("\n", 0, pos) + 1
            if kind[0] != "init":  # the constructor's header goes on
                header_start = pos + 1
            continue
        header = code[header_start:pos]
        if any(k[0] in ("function", "other") for k in scopes):
            scopes.append(("other",))
        elif re.search(r"\b(namespace|class|struct|union|enum)\b", header) and "(" not in header:
            scopes.append(("scope",))
        elif re.match(r"\s*extern\b", header) and "(" not in header:
            scopes.append(("scope",))
        elif re.search(r"\)\s*:", header) and re.search(r"[\w>]\s*$", header):
            scopes.append(("init",))
        elif "(" in header and not re.search(r"=\s*$", header):
            name_at = header.find("(")
            m_name = re.search(r"([~\w:<>]+)\s*$", header[:name_at])
            name = m_name.group(1) if m_name else "?"
            line = code.count("\n", 0, header_start + name_at) + 1
            scopes.append(("function", name, line))
        else:
            scopes.append(("other",))
        if scopes[-1][0] != "init":
            header_start = pos + 1


def main():
    root, dirs = sys.argv[1], sys.argv[2:]
    files = subprocess.run(["git", "-C", root, "ls-files", "--", *dirs], check=True,
                           capture_output=True, text=True).stdout.split()
    files = [f for f in files if f.endswith((".c", ".cc", ".h", ".hpp"))]
    if not files:
        print("check_sizes: no sources found (not a git checkout?)", file=sys.stderr)
        return 1
    bad = []
    longest_file = (0, "")
    longest_fn = (0, "")
    for f in files:
        with open(f"{root}/{f}", encoding="utf-8") as fh:
            text = fh.read()
        lines = text.count("\n")
        longest_file = max(longest_file, (lines, f))
        if lines > MAX_FILE_LINES:
            bad.append(f"{f}: {lines} lines (at most {MAX_FILE_LINES})")
        for name, first, last in functions(text):
            n = last - first + 1
            longest_fn = max(longest_fn, (n, f"{f}:{first} {name}"))
            if n > MAX_FUNCTION_LINES:
                bad.append(f"{f}:{first}: {name} has {n} lines (at most {MAX_FUNCTION_LINES})")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"check_sizes: {len(files)} files; longest file {longest_file[1]} ({longest_file[0]}); "
          f"longest function {longest_fn[1]} ({longest_fn[0]})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
