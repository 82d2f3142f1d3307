#!/usr/bin/env python3
"""Keeps the rooms small and the paths true (run by .ci/run).

Three checks over the files git knows (tracked, or untracked and not ignored):

1. No non-test source file (C++, CUDA, Python, shell) is over MAX_FILE_LINES
   lines.
2. No function in a non-test C++/CUDA file is over MAX_FUNCTION_LINES lines,
   counted from the line of its opening brace to the line of its closing
   brace. A brace-depth scan: comments, strings and raw strings are blanked
   first; a block counts as a function when the text before its '{' ends in
   ')' followed only by qualifiers (const, override, noexcept, ...), a
   constructor's initialiser list, or a lambda's '->' return type. Blocks of
   namespaces, classes, structs, enums and control statements are skipped.
3. Every repository path named in README.md, docs/*.md, configs, scripts and
   source comments (a token such as `server/shard.h` or `tools/demo.sh`
   under one of the top-level folders; #include lines are left to the
   compiler) exists, and so does every relative link of a Markdown file.

Exceptions are listed below, each with its reason. Exit 1 with one line per
offence; exit 0 with a one-line summary.

  tools/check_layout.py            check the whole tree
  tools/check_layout.py --verbose  also list the five longest files/functions
"""
import argparse
import os
import re
import subprocess
import sys
from typing import Iterator, List, Tuple

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

# path -> reason. Keep this short: a file listed here is a debt, not a rule.
FILE_EXCEPTIONS = {}
# (path, first line of the function's signature) -> reason.
FUNCTION_EXCEPTIONS = {}

TOP_DIRS = ("common", "core", "server", "worker", "tools", "tests", "python",
            "proto", "configs", "docs", "fuzz", "examples", "third_party")
SOURCE_EXT = (".cc", ".h", ".cu", ".cuh")
SCRIPT_EXT = (".py", ".sh")
# Files whose text is scanned for repository paths.
PATH_SCAN_EXT = SOURCE_EXT + SCRIPT_EXT + (".md", ".pbtxt", ".bazel", ".proto",
                                           ".sbatch")
GENERATED_EXT = (".pb.h", ".pb.cc")  # protoc writes these into bazel-bin
PATH_TOKEN = re.compile(
    r"(?<![\w./$-])((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_])" % "|".join(TOP_DIRS))
# A path token must end in one of these to be checked (a bare folder too).
PATH_CHECK_EXT = (".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".pbtxt",
                  ".proto", ".bazel", ".sbatch", ".png", ".csv", ".json")


def git_files(root: str) -> List[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, check=True, capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if os.path.isfile(os.path.join(root, f))]


def is_test_file(path: str) -> bool:
    name = os.path.basename(path)
    return ("/testing/" in "/" + path or re.search(r"_test\.\w+$", name) is not None
            or name.startswith("test_") or path.startswith("tests/")
            or path.startswith("fuzz/") or path.startswith("third_party/"))


def blank_comments_and_strings(src: str) -> str:
    """Replaces comments and literals by blanks, keeping every newline."""
    out: List[str] = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        m = re.match(r'R"([^(\s]{0,16})\(', src[i:i + 20])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = ")" + m.group(1) + '"'
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        c = src[i]
        if c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()
                               and i + 1 < n and src[i + 1].isalnum()):
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


NOT_FUNCTION = re.compile(
    r"\b(namespace|class|struct|union|enum|if|else|for|while|do|switch|try|"
    r"catch|extern)\b[^;{}]*$")
FUNCTION_TAIL = re.compile(
    r"(\)\s*(const|override|final|noexcept|mutable|volatile|&|&&|\s)*"
    r"(->\s*[\w:<>,\s*&]+)?|\)\s*:\s*[^;{}]*[)}])\s*$", re.S)


def functions(src: str) -> Iterator[Tuple[int, int, str]]:
    """Yields (first line, line count, signature) of each function body."""
    text = blank_comments_and_strings(src)
    lines = src.split("\n")
    stack: List[Tuple[int, bool, int]] = []  # (line, is_function, offset)
    line = 1
    last = 0  # offset after the last ';', '{' or '}'
    for k, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch == "{":
            head = text[last:k]
            in_function = any(f for _, f, _ in stack)
            is_fn = (not in_function and not NOT_FUNCTION.search(head)
                     and FUNCTION_TAIL.search(head) is not None)
            stack.append((line, is_fn, k))
            last = k + 1
        elif ch == "}":
            if stack:
                start, is_fn, _ = stack.pop()
                if is_fn:
                    yield start, line - start + 1, lines[start - 1].strip()
            last = k + 1
        elif ch == ";":
            last = k + 1


def signature_line(src_lines: List[str], brace_line: int) -> str:
    """The function's first line: walks up from its '{' to a line at column 0."""
    i = brace_line - 1
    while i > 0 and (src_lines[i][:1].isspace() or src_lines[i][:1] in ")"
                     or not src_lines[i].strip()):
        i -= 1
    return src_lines[i].strip()


def check_sizes(root: str, files: List[str], verbose: bool) -> List[str]:
    errors, longest_files, longest_fns = [], [], []
    for f in files:
        if is_test_file(f) or not f.endswith(SOURCE_EXT + SCRIPT_EXT):
            continue
        src = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        n = src.count("\n")
        longest_files.append((n, f))
        if n > MAX_FILE_LINES and f not in FILE_EXCEPTIONS:
            errors.append(f"{f}: {n} lines (at most {MAX_FILE_LINES}; split it along its seams)")
        if not f.endswith(SOURCE_EXT):
            continue
        src_lines = src.split("\n")
        for start, count, _ in functions(src):
            sig = signature_line(src_lines, start)
            longest_fns.append((count, f"{f}:{start}", sig))
            if count > MAX_FUNCTION_LINES and (f, sig) not in FUNCTION_EXCEPTIONS:
                errors.append(f"{f}:{start}: function of {count} lines (at most "
                              f"{MAX_FUNCTION_LINES}): {sig[:70]}")
    if verbose:
        for n, f in sorted(longest_files, reverse=True)[:5]:
            print(f"  file {n:5d} {f}")
        for n, where, sig in sorted(longest_fns, reverse=True)[:5]:
            print(f"  function {n:4d} {where} {sig[:60]}")
    return errors


def check_paths(root: str, files: List[str]) -> List[str]:
    errors = []
    for f in files:
        if not f.endswith(PATH_SCAN_EXT) and os.path.basename(f) != "README.md":
            continue
        if f.startswith("third_party/") or f.startswith("tools/check_layout"):
            continue
        text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        for ln, line in enumerate(text.split("\n"), 1):
            if line.lstrip().startswith("#include"):
                continue  # the compiler checks these
            for m in PATH_TOKEN.finditer(line):
                p = m.group(1).rstrip(".")
                if p.endswith(GENERATED_EXT) or "..." in p:
                    continue
                if not p.endswith(PATH_CHECK_EXT) or "*" in line[m.end():m.end() + 1]:
                    continue
                if "{" in p or "<" in p or p.endswith("/"):
                    continue
                if not os.path.exists(os.path.join(root, p)):
                    errors.append(f"{f}:{ln}: names {p}, which does not exist")
            if f.endswith(".md"):
                errors += check_markdown_links(root, f, ln, line)
    return errors


MD_LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def check_markdown_links(root: str, md: str, ln: int, line: str) -> List[str]:
    """Relative links of a Markdown file resolve from the file's folder."""
    errors = []
    for m in MD_LINK.finditer(line):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path = os.path.normpath(os.path.join(root, os.path.dirname(md), target))
        if not os.path.exists(path):
            errors.append(f"{md}:{ln}: links to {target}, which does not exist")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", action="store_true",
                        help="also list the longest files and functions")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the repository's root (default: this script's ..)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = git_files(root)
    errors = check_sizes(root, files, args.verbose) + check_paths(root, files)
    for e in errors:
        print(f"check_layout: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"check_layout: {len(files)} files: none over {MAX_FILE_LINES} lines, no function "
          f"over {MAX_FUNCTION_LINES} lines, every named path exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
