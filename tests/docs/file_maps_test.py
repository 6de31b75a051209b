#!/usr/bin/env python3
"""file_maps_test.py - the maps of the source tree are complete and every path they name exists.

Three checks; each problem is one line, and any problem fails the test (exit 1).

1. Folder maps. For core/, shim/ and tools/ and each of their subfolders, and tests/programs/:
   the folder has a README.md, and every file in it (not in its subfolders, which have
   their own) is named there in backquotes, as `name` or, for a header and its source,
   `stem.*`. A file added without a line in its folder's map fails here, so the maps stay
   complete.

2. The map of tests/. tests/README.md names each subfolder of tests/ in backquotes, as
   `name/` (their own subfolders are described by their own README.md where they need one).

3. Paths named in prose exist. Scanned: README.md, docs/*.md and every README.md under the
   source folders (the whole Markdown text, code blocks included), and the comments of the
   code: // and /* */ comments in *.cpp *.h *.cu *.cuh *.c *.mjs *.map *.map.in (string
   literals skipped); # comments and docstrings in *.py; # comments in meson.build,
   meson_options.txt, *.sh and the files of scripts/ and .ci/. Not scanned: the inputs
   under tests/data and tests/fuzz/corpus (data, not prose; their README.md files are).
   A path is a token that starts with a top-level source folder - core/ shim/ tools/
   tests/ docs/ scripts/ .ci/ - where no letter, digit or one of _ . / - $ ~ comes just
   before it (so build/tests/x, ../../shim/x, $OUT/tests/x and the paths inside URLs are
   not paths of this repository), and runs on over letters, digits and _ . / - * % < >
   and {a,b} groups. Then:
   - trailing dots, and a Markdown anchor (#...), are not part of it;
   - {a,b} stands for both paths (core/planner/tlsf.{h,cpp});
   - a component written <like-this> is a placeholder (tests/fuzz/corpus/<target>/): only
     the path before it is checked;
   - * is a glob (core/io/path_pattern.*) that must match at least one file;
   - a trailing / names a folder, which must exist as one;
   - a path that does not exist in the source tree may name a build output of its folder:
     F/NAME, F/libNAME.so or F/libNAME.so.1 is accepted when F/meson.build quotes NAME, or
     quotes two strings that join into NAME ('test_core_' + t[0] with t[0] quoted as
     'caching_allocator'): that is how commands name targets
     (ninja -C build tests/bench/bench_allocator).
   In Markdown, the target of every relative link [text](target) must exist too, taken
   from the folder of the file that holds it (URLs and bare #anchors are not checked).
   A document named by its bare file name (a word ending in .md, no folder before it) must
   exist beside the file that names it, in docs/ or at the top.

Usage: file_maps_test.py SOURCE_ROOT
"""
import ast
import bisect
import glob
import io
import os
import re
import sys
import tokenize

TOP_FOLDERS = ("core", "shim", "tools", "tests", "docs", "scripts", ".ci")
DATA_FOLDERS = ("tests/data", "tests/fuzz/corpus")  # inputs, not prose (READMEs excepted)

PATH_TOKEN = re.compile(r"(?<![\w./$~-])(?:core|shim|tools|tests|docs|scripts|\.ci)/"
                        r"(?:[\w.*%<>/-]|\{[\w.,*-]*\})*")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
BARE_DOC = re.compile(r"(?<![\w./$~-])[\w-]+\.md\b")
# C-like sources: comments, and the literals a comment marker inside must not start one.
C_LEXEMES = re.compile(r"""(?P<comment>//[^\n]*|/\*.*?\*/)"""
                       r"""|\b(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)\""""
                       r"""|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)
HASH_COMMENT = re.compile(r"(?:^|(?<=\s))#(?!!)[^\n]*", re.M)
C_LIKE = (".cpp", ".h", ".cu", ".cuh", ".c", ".mjs", ".map", ".map.in")


# ---- 1 and 2: the folder maps ------------------------------------------------------------

def mapped_folders(root):
    yield os.path.join("tests", "programs")
    for top in ("core", "shim", "tools"):
        for dirpath, dirnames, _ in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            yield os.path.relpath(dirpath, root)


def backquoted(path):
    """The `names` of a Markdown file's prose (fenced code blocks left out)."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    return set(re.findall(r"`([^`]+)`", text))


def check_folder_maps(root, problems):
    for folder in mapped_folders(root):
        path = os.path.join(root, folder)
        readme = os.path.join(path, "README.md")
        if not os.path.isfile(readme):
            problems.append(f"{folder}/ has no README.md mapping its files")
            continue
        named = backquoted(readme)
        for name in sorted(os.listdir(path)):
            if name == "README.md" or not os.path.isfile(os.path.join(path, name)):
                continue
            stem = name.split(".")[0]
            if name not in named and f"{stem}.*" not in named:
                problems.append(f"{folder}/{name} is not in {folder}/README.md")


def check_tests_map(root, problems):
    readme = os.path.join(root, "tests", "README.md")
    if not os.path.isfile(readme):
        problems.append("tests/ has no README.md mapping its folders")
        return
    named = backquoted(readme)
    for name in sorted(os.listdir(os.path.join(root, "tests"))):
        if os.path.isdir(os.path.join(root, "tests", name)) and not name.startswith((".", "__")):
            if f"{name}/" not in named:
                problems.append(f"tests/{name}/ is not in tests/README.md (as `{name}/`)")


# ---- 3: paths named in prose -------------------------------------------------------------

def scanned_files(root):
    """(relative path, kind) of every file whose prose is checked."""
    for name in ("README.md", "meson.build", "meson_options.txt"):
        if os.path.isfile(os.path.join(root, name)):
            yield name, kind_of(name)
    for top in TOP_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            data = any(rel_dir == d or rel_dir.startswith(d + "/") for d in DATA_FOLDERS)
            for name in sorted(filenames):
                rel = os.path.join(rel_dir, name)
                if data and name != "README.md":
                    continue
                if top in ("scripts", ".ci") and "." not in name:
                    yield rel, "hash"
                    continue
                if top == "docs" and rel_dir != "docs" and name != "README.md":
                    continue
                kind = kind_of(name)
                if kind and (kind != "markdown" or name == "README.md" or rel_dir == "docs"):
                    yield rel, kind


def kind_of(name):
    if name.endswith(".md"):
        return "markdown"
    if name.endswith(C_LIKE):
        return "c"
    if name.endswith(".py"):
        return "python"
    if name in ("meson.build", "meson_options.txt") or name.endswith(".sh"):
        return "hash"
    return None


def prose(text, kind):
    """(offset, text) pieces of `text` that are prose: comments, docstrings, Markdown."""
    if kind == "markdown":
        yield 0, text
    elif kind == "c":
        for m in C_LEXEMES.finditer(text):
            if m.group("comment"):
                yield m.start(), m.group("comment")
    elif kind == "hash":
        for m in HASH_COMMENT.finditer(text):
            yield m.start(), m.group(0)
    elif kind == "python":
        starts = line_starts(text)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield starts[tok.start[0] - 1] + tok.start[1], tok.string
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)):
                    yield starts[body[0].lineno - 1], body[0].value.value


def line_starts(text):
    starts = [0]
    starts.extend(i + 1 for i, c in enumerate(text) if c == "\n")
    return starts


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [p for alt in m.group(1).split(",")
            for p in expand_braces(token[:m.start()] + alt + token[m.end():])]


class BuildTargets:
    """Strings quoted in a folder's meson.build: the names of what it builds."""

    def __init__(self, root):
        self.root = root
        self.cache = {}

    def names(self, folder):
        if folder not in self.cache:
            path = os.path.join(self.root, folder, "meson.build")
            quoted = set()
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    quoted = set(re.findall(r"'([\w.+-]+)'", f.read()))
            self.cache[folder] = quoted
        return self.cache[folder]

    def builds(self, path):
        folder, name = os.path.split(path)
        name = re.sub(r"^lib(.+)\.so(\.\d+)*$", r"\1", name)
        quoted = self.names(folder)
        return name in quoted or any(name.startswith(q) and name[len(q):] in quoted for q in quoted)


def path_exists(root, path, targets):
    if "<" in path:  # a placeholder: what comes before it exists
        path = path[:path.index("<")]
        if not path.endswith("/"):
            path += "*"
    if "*" in path:
        return bool(glob.glob(os.path.join(root, path)))
    full = os.path.join(root, path)
    if path.endswith("/"):
        return os.path.isdir(full)
    return os.path.exists(full) or targets.builds(path)


def missing_paths(root, rel, kind, piece, targets):
    """(offset in piece, message) for each path named in one piece of prose that is not there."""
    folder = os.path.dirname(rel)
    for m in PATH_TOKEN.finditer(piece):
        token = m.group(0).split("#")[0].rstrip(".")
        for path in expand_braces(token):
            if not path_exists(root, path, targets):
                yield m.start(), (token if path == token else f"{token} ({path})") + " does not exist"
    for m in BARE_DOC.finditer(piece):
        if not any(os.path.isfile(os.path.join(root, d, m.group(0))) for d in (folder, "docs", "")):
            yield m.start(), f"{m.group(0)} is in neither {folder or '.'}/, docs/ nor the top folder"
    if kind == "markdown":
        for m in MD_LINK.finditer(piece):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(folder, target))
            if not os.path.exists(os.path.join(root, path)):
                yield m.start(1), f"link {m.group(1)} ({path}) does not exist"


def check_named_paths(root, problems):
    targets = BuildTargets(root)
    for rel, kind in scanned_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        starts = None
        for offset, piece in prose(text, kind):
            for at, message in missing_paths(root, rel, kind, piece, targets):
                starts = starts or line_starts(text)
                problems.append(f"{rel}:{bisect.bisect_right(starts, offset + at)}: {message}")


def main():
    root = sys.argv[1]
    problems = []
    check_folder_maps(root, problems)
    check_tests_map(root, problems)
    check_named_paths(root, problems)
    for p in problems:
        print(p)
    print(f"file maps and named paths: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
