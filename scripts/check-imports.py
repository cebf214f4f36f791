#!/usr/bin/env python3
"""Finds import cycles between the modules of Rust crates.

    scripts/check-imports.py [--report-only] SRC_DIR...   check each crate source dir
    scripts/check-imports.py --self-test                  prove it finds planted cycles

For every crate root in SRC_DIR (lib.rs, main.rs, bin/*.rs, bin/*/main.rs) it follows the `mod`
declarations to map each file to its module path, then collects the module references each file
makes: `use` trees (crate::, self::, super::, or a child module's name) and paths in code that
start with `crate::`, `self::`, `super::` or a child module's name. A `mod` declaration is not a
reference (a parent declaring its children is not an import); neither are comments, strings,
doc links or `pub(in crate::x)`. A path through a name that a module imports (`pub use`, or a
private `use` seen from below) is followed to where the item lives, so `crate::Settings`
re-exported by lib.rs counts as a reference to `config`, not to the crate root.

Cycles are reported at two granularities: between the top-level modules of a crate (each with
everything below it), and between the files of each folder module (the folder's own file and
each of its children, each with everything below it). Each cycle is printed with all its edges
and where each edge comes from (file:line). Exit status: 0 with no cycle, 1 with one (0 in any
case under --report-only), 2 on a usage error. Standard library only; it reads no Cargo.toml and
needs no build.
"""

import os
import re
import sys
import tempfile
from collections import defaultdict

# ---------------------------------------------------------------------------------------------
# Lexing: just enough Rust to skip comments, strings and chars, and keep idents and punctuation.

_IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
_RAW_STR = re.compile(r'b?r(#*)"')
_NUMBER = re.compile(r"[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?")


def tokens(text):
    """Yields (kind, value, line): kind 'id' (identifier or keyword), 's' (string literal, its
    text unescaped only as far as needed here) or 'p' (punctuation; '::' is one token)."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
        elif (m := _RAW_STR.match(text, i)) is not None:
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            yield ("s", text[m.end() : j - len(end)], line)
            line += text.count("\n", i, j)
            i = j
        elif c == '"' or text.startswith('b"', i):
            start = line
            i += 2 if c == "b" else 1
            j = i
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            yield ("s", text[j:i], start)
            line += text.count("\n", j, i)
            i += 1
        elif c == "'" or text.startswith("b'", i):
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a); lifetimes are skipped too.
            j = i + (2 if c == "b" else 1)
            if j < n and text[j] == "\\":
                k = text.find("'", j + 2)
                i = n if k < 0 else k + 1
            elif j + 1 < n and text[j + 1] == "'":
                i = j + 2
            else:
                m = _IDENT.match(text, j)
                i = m.end() if m else j
        elif (m := _IDENT.match(text, i)) is not None:
            yield ("id", m.group(0).removeprefix("r#"), line)
            i = m.end()
        elif text.startswith("::", i):
            yield ("p", "::", line)
            i += 2
        elif c.isdigit():
            i = _NUMBER.match(text, i).end()
        else:
            yield ("p", c, line)
            i += 1


# ---------------------------------------------------------------------------------------------
# Parsing one file: mod declarations, use trees, paths, inline module scopes, pub re-exports.

KEYWORDS = {"crate", "self", "super"}


class Scope:
    """A module in the tree: a file module or an inline `mod x { }` inside one."""

    def __init__(self, path, file, parent):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file that holds it (an inline module's is its file's)
        self.parent = parent
        self.children = {}  # name -> Scope
        self.file_children = set()  # names of children that are files of their own
        self.names = {}  # name -> the absolute path a `use` here brings it from
        self.test = parent is not None and parent.test  # under #[cfg(test)]


def _skip_group(toks, i):
    """toks[i] opens ( [ or {; returns the index after its match."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[toks[i][1]]]
    i += 1
    while i < len(toks) and stack:
        v = toks[i][1]
        if toks[i][0] == "p" and v in pairs:
            stack.append(pairs[v])
        elif toks[i][0] == "p" and v == stack[-1]:
            stack.pop()
        i += 1
    return i


def _use_tree(toks, i, prefix, out):
    """Parses a use tree at toks[i]; appends (path, alias, line); returns the index after it."""
    path = list(prefix)
    while i < len(toks):
        kind, v, line = toks[i]
        if kind == "p" and v == "{":
            i += 1
            while i < len(toks) and toks[i][1] != "}":
                i = _use_tree(toks, i, path, out)
                if i < len(toks) and toks[i][1] == ",":
                    i += 1
            return i + 1
        if kind == "p" and v == "*":
            out.append((path + ["*"], None, line))
            return i + 1
        if kind == "id":
            path.append(v)
            i += 1
            if i < len(toks) and toks[i][1] == "::":
                i += 1
                continue
            alias = None
            if i + 1 < len(toks) and toks[i][1] == "as":
                alias = toks[i + 1][1]
                i += 2
            out.append((path, alias, line))
            return i
        if kind == "p" and v == "::":  # a leading `::` (extern path)
            path.append("::")
            i += 1
            continue
        return i + 1
    return i


def parse_file(text, scope, declare):
    """Reads one file module into `scope`. `declare(parent, name, path_attr, test, line)` is
    called for each `mod name;` and returns the child's Scope (or None). Returns (uses, paths):
    uses as (scope, [(path, alias, line)]) and code paths as (scope, path, line), both still
    relative to the scope they are written in."""
    toks = list(tokens(text))
    stack = [(scope, None)]  # (scope, the brace depth at which it closes)
    depth = 0
    path_attr = None  # the `#[path = "..."]` before the next item
    cfg_test = False  # whether a `#[cfg(test)]` is before the next item
    uses, paths = [], []
    i = 0
    while i < len(toks):
        kind, v, line = toks[i]
        cur = stack[-1][0]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if not (kind == "p" and v == "#") and not (kind == "id" and v in ("pub", "mod")):
            path_attr, cfg_test = None, False  # attributes belong to the item they precede
        if kind == "p" and v == "#":
            j = i + 2 if nxt == "!" else i + 1
            if j < len(toks) and toks[j][1] == "[":
                end = _skip_group(toks, j)
                attr = toks[j + 1 : end - 1]
                kinds = [(t[0], t[1] if t[0] != "s" else "") for t in attr]
                is_test = [t[1] for t in attr] == ["cfg", "(", "test", ")"]
                if nxt == "!":  # an inner attribute: of the module it is in
                    cur.test |= is_test
                elif kinds == [("id", "path"), ("p", "="), ("s", "")]:
                    path_attr = attr[2][1]
                cfg_test |= is_test and nxt != "!"
                i = end
                continue
        if kind == "p" and v == "{":
            depth += 1
        elif kind == "p" and v == "}":
            depth -= 1
            if len(stack) > 1 and stack[-1][1] == depth:
                stack.pop()
        elif kind == "id" and v == "pub" and nxt == "(":
            # pub(crate), pub(super), pub(in path): a visibility, not a reference.
            i = _skip_group(toks, i + 1)
            continue
        elif kind == "id" and v == "use":
            items = []
            i = _use_tree(toks, i + 1, [], items)
            uses.append((cur, items))
            while i < len(toks) and toks[i][1] != ";":
                i += 1
            continue
        elif kind == "id" and v == "mod" and i + 2 < len(toks) and toks[i + 1][0] == "id":
            name, after = toks[i + 1][1], toks[i + 2][1]
            if after == ";":
                child = declare(cur, name, path_attr, cfg_test, line)
                if child is not None:
                    cur.children[name] = child
                    cur.file_children.add(name)
                path_attr, cfg_test = None, False
                i += 3
                continue
            if after == "{":
                child = Scope(cur.path + (name,), cur.file, cur)
                child.test |= cfg_test
                cur.children[name] = child
                stack.append((child, depth))
                depth += 1
                path_attr, cfg_test = None, False
                i += 3
                continue
        elif kind == "id" and nxt == "::":
            # A path in code; it counts if it starts with crate/self/super or a child module
            # (decided once the whole tree is known). `$crate` in a macro is this crate too.
            path, j = [], i
            while j < len(toks) and toks[j][0] == "id":
                path.append(toks[j][1])
                if j + 1 < len(toks) and toks[j + 1][1] == "::":
                    j += 2
                else:
                    j += 1
                    break
            paths.append((cur, path, line))
            i = j
            continue
        i += 1
    return uses, paths


# ---------------------------------------------------------------------------------------------
# Crate loading and name resolution.


class Crate:
    def __init__(self, src, root_file):
        self.src = src
        self.root_file = root_file
        self.root = Scope((), root_file, None)
        self.scopes = {(): self.root}
        self.uses = []
        self.paths = []
        self.errors = []
        self._load(self.root, root_file, is_root=True)

    def _mod_dir(self, file, is_root):
        base = os.path.basename(file)
        d = os.path.dirname(file)
        if is_root or base == "mod.rs":
            return d
        return os.path.join(d, base[:-3])

    def _load(self, scope, file, is_root=False):
        with open(file, encoding="utf-8") as f:
            text = f.read()
        mod_dir = self._mod_dir(file, is_root)

        def declare(parent, name, path_attr, test, line):
            # An inline parent `mod a { mod b; }` looks for b in the file's module dir + a/.
            d = os.path.join(mod_dir, *parent.path[len(scope.path) :])
            if path_attr is not None:
                # Relative to the declaring file's directory (or to d inside an inline module).
                inline = len(parent.path) > len(scope.path)
                cands = [os.path.join(d if inline else os.path.dirname(file), path_attr)]
            else:
                cands = [os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")]
            for c in cands:
                if os.path.isfile(c):
                    child = Scope(parent.path + (name,), c, parent)
                    child.test |= test
                    self.scopes[child.path] = child
                    self._load(child, c)
                    return child
            shown = ", ".join(rel(c, self.src) for c in cands)
            self.errors.append(f"{rel(file, self.src)}:{line}: mod {name}: no file ({shown})")
            return None

        uses, paths = parse_file(text, scope, declare)
        self.uses.extend(uses)
        self.paths.extend(paths)
        self._index(scope)

    def _index(self, scope):
        for name, child in scope.children.items():
            self.scopes.setdefault(child.path, child)
            self._index(child)

    def absolute(self, scope, path):
        """A use/code path as written in `scope` -> absolute module path, or None if external."""
        if not path:
            return None
        head = path[0]
        if head == "crate":
            return list(path[1:])
        if head == "self":
            return list(scope.path) + list(path[1:])
        if head == "super":
            base = list(scope.path)
            k = 0
            while k < len(path) and path[k] == "super":
                if not base:
                    return None
                base.pop()
                k += 1
            if k < len(path) and path[k] == "self":
                k += 1
            return base + list(path[k:])
        if head in scope.children:
            return list(scope.path) + list(path)
        return None

    def resolve(self, path, depth=0):
        """An absolute path -> the module path of the file module where its item lives."""
        path = [p for p in path if p not in ("*", "self")]
        k = 0
        while k < len(path) and tuple(path[: k + 1]) in self.scopes:
            k += 1
        mod = tuple(path[:k])
        if k < len(path) and depth < 16:
            s = self.scopes[mod]
            target = s.names.get(path[k])
            if target is not None and target != path[: k + 1]:
                return self.resolve(list(target) + path[k + 1 :], depth + 1)
        return self.file_module(mod)

    def file_module(self, mod):
        s = self.scopes[mod]
        while s.parent is not None and s.file == s.parent.file:
            s = s.parent
        return s.path

    def finish(self):
        """Every reference between file modules: [(from, to, file, line, text, in test code)]."""
        # Names brought in by `use` first (a `pub use` makes a name of its module, and a private
        # one is seen by the module's descendants), so that paths through them can be followed.
        for scope, items in self.uses:
            for path, alias, _ in items:
                a = self.absolute(scope, path)
                if a is None or a[-1] == "*":
                    continue
                target = a[:-1] if a[-1] == "self" else a
                name = alias or (target[-1] if target else None)
                if name and name != "_":
                    scope.names[name] = target
        refs = []
        for scope, items in self.uses:
            for path, _, line in items:
                shown = path[:-1] if len(path) > 1 and path[-1] == "self" else path
                refs.append((scope, path, line, "use " + "::".join(shown)))
        for scope, path, line in self.paths:
            refs.append((scope, path, line, "::".join(path)))
        out = []
        for scope, path, line, text in refs:
            a = self.absolute(scope, path)
            if a is None:
                continue
            src, dst = self.file_module(scope.path), self.resolve(a)
            if src != dst:
                out.append((src, dst, scope.file, line, text, scope.test))
        return out


def rel(path, base):
    return os.path.relpath(path, base)


# ---------------------------------------------------------------------------------------------
# Graphs and cycles.


def sccs(nodes, adj):
    """Tarjan's strongly connected components, iteratively; components of more than one node."""
    index, low, on, stack, result = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(adj.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    result.append(sorted(comp))
    return result


def shortest_cycle(comp, adj):
    """One shortest cycle through the component's first node (breadth-first)."""
    start, members = comp[0], set(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(adj.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def name(mod):
    return "::".join(mod) if mod else "crate"


def cycles_of(crate, edges):
    """[(level, [members], [(a, b, [(file, line, text, test)])], example)] for every cycle."""
    found = []
    folders = sorted(p for p, s in crate.scopes.items() if s.file_children)
    for folder in folders:
        n = len(folder)

        def node(mod):
            return tuple(mod[: n + 1])

        adj, where = defaultdict(set), defaultdict(list)
        nodes = {folder} | {folder + (c,) for c in crate.scopes[folder].file_children}
        for src, dst, file, line, text, test in edges:
            if src[:n] != folder or dst[:n] != folder:
                continue
            a, b = node(src), node(dst)
            if a == b:
                continue
            adj[a].add(b)
            where[(a, b)].append((file, line, text, test))
        for comp in sccs(nodes, adj):
            members = set(comp)
            es = [(a, b, where[(a, b)]) for a in comp for b in sorted(adj[a]) if b in members]
            level = "top-level modules" if not folder else f"files of folder module {name(folder)}"
            found.append((level, comp, es, shortest_cycle(comp, adj)))
    return found


def crate_roots(src):
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
    roots = [r for r in roots if os.path.isfile(r)]
    bindir = os.path.join(src, "bin")
    if os.path.isdir(bindir):
        for f in sorted(os.listdir(bindir)):
            p = os.path.join(bindir, f)
            if f.endswith(".rs") and os.path.isfile(p):
                roots.append(p)
            elif os.path.isfile(os.path.join(p, "main.rs")):
                roots.append(os.path.join(p, "main.rs"))
    return roots


def check(src, out=sys.stdout):
    """Prints the report for one source dir; returns (cycles, errors) with cycles as
    [(level, members)]."""
    roots = crate_roots(src)
    if not roots:
        print(f"{src}: no crate root (lib.rs, main.rs, bin/*.rs)", file=out)
        return [], 1
    cycles, errors = [], 0
    for root in roots:
        crate = Crate(src, root)
        edges = crate.finish()
        found = cycles_of(crate, edges)
        files = {s.file for s in crate.scopes.values()}
        pairs = {(a, b) for a, b, *_ in edges}
        label = f"{src} ({rel(root, src)}: {len(files)} files, {len(pairs)} module edges)"
        for e in crate.errors:
            print(f"{label}: error: {e}", file=out)
        errors += len(crate.errors)
        if not found:
            print(f"{label}: no import cycle", file=out)
            continue
        print(f"{label}: {len(found)} import cycle(s)", file=out)
        for level, comp, es, example in found:
            print(f"  cycle between {level}: {', '.join(name(m) for m in comp)}", file=out)
            print(f"    e.g. {' -> '.join(name(m) for m in example)}", file=out)
            for a, b, locs in es:
                # The first place outside test code, if any.
                f, line, text, test = min(locs, key=lambda loc: (loc[3], loc[0], loc[1]))
                more = f" (+{len(locs) - 1} more)" if len(locs) > 1 else ""
                tests = " [only in #[cfg(test)] code]" if test else ""
                where = f"{rel(f, src)}:{line} {text}{more}{tests}"
                print(f"    {name(a)} -> {name(b)}: {where}", file=out)
        cycles += [(level, [name(m) for m in comp]) for level, comp, _, _ in found]
    return cycles, errors


# ---------------------------------------------------------------------------------------------
# Self-test: planted cycles must be found, and what is not an import must not be counted.

FIXTURES = {
    # a <-> b through a lib.rs re-export; x <-> y inside folder module f; c <-> d where c's
    # side is only test code (a test file module and an inline module in it) and d's is not
    # (d/real.rs follows a `#[cfg(test)] fn`, whose attribute is not the module's); e is clean.
    "cyclic": {
        "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\npub use b::Thing;\n",
        "a.rs": "use crate::Thing;\npub fn go() {}\n",
        "b.rs": "pub struct Thing;\nfn f() { super::a::go() }\n",
        "c.rs": "pub fn h() {}\n#[cfg(test)]\nmod tests;\n",
        "c/tests.rs": "fn t() { crate::d::f() }\nmod inner {\n    fn u() { crate::d::f() }\n}\n",
        "d.rs": "pub fn f() {}\n#[cfg(test)]\nfn helper() {}\nmod real;\n",
        "d/real.rs": "fn r() { crate::c::h() }\n",
        "e.rs": "use crate::a::go;\n",
        "f/mod.rs": "mod x;\nmod y;\n",
        "f/x.rs": "use super::y::Y;\npub struct X;\n",
        "f/y.rs": "pub struct Y;\nmacro_rules! x { () => { $crate::f::x::X }; }\n",
    },
    # Nothing here is an import cycle: a parent declaring children (and a child using its
    # parent), a reference in a comment, a doc link, a string, `pub(in crate::b)`, a test module's
    # `use super::*`, a raw string, a lifetime next to a char, and an external path whose second
    # segment is the name of a module (`ext::a`).
    "clean": {
        "lib.rs": (
            "pub mod a;\nmod b;\n/// See [`crate::b::B`].\npub struct Root;\n"
            "fn other() { let _ = ext::a::f(); }\n"
        ),
        "a.rs": (
            "use crate::b::B;\n// crate::b is used, and b uses crate::a... only in this comment\n"
            "pub(in crate::a) fn f<'a>(_: &'a B) -> char { 'x' }\n"
            "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::Root;\n}\n"
        ),
        "b/mod.rs": "mod inner;\npub use inner::B;\n",
        "b/inner.rs": (
            'pub(in crate::b) struct B;\nconst S: &str = "crate::a::f";\n'
            'const R: &str = r#"use crate::a;"#;\nfn f() -> super::super::Root { todo!() }\n'
        ),
    },
    # A cycle through a `pub use` in the parent that points back: p::q uses p's re-export of r,
    # and r uses q through an inline module's re-export; r's file is named by #[path].
    "reexport": {
        "main.rs": "mod p;\nfn main() {}\n",
        "p/mod.rs": (
            'mod q;\n#[path = "rr.rs"]\nmod r;\npub use self::r::R;\n'
            "mod inline {\n    pub use super::q::Q;\n}\n"
        ),
        "p/q.rs": "pub struct Q(super::R);\n",
        "p/rr.rs": "pub struct R;\nfn f() { let _ = super::inline::Q; }\n",
    },
}


def self_test():
    import io

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for fixture, files in FIXTURES.items():
            for path, text in files.items():
                p = os.path.join(tmp, fixture, path)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w") as f:
                    f.write(text)

        def run(fixture):
            buf = io.StringIO()
            found, errors = check(os.path.join(tmp, fixture), buf)
            return found, errors, buf.getvalue()

        def expect(fixture, cycles, lines):
            found, errors, text = run(fixture)
            if errors or found != cycles:
                failures.append(f"{fixture}: want {cycles}; got {found}, {errors} errors:\n{text}")
            failures.extend(f"{fixture}: no line {w!r} in:\n{text}" for w in lines if w not in text)

        expect(
            "cyclic",
            [
                ("top-level modules", ["a", "b"]),
                ("top-level modules", ["c", "d"]),
                ("files of folder module f", ["f::x", "f::y"]),
            ],
            [
                "a -> b: a.rs:1 use crate::Thing\n",
                "b -> a: b.rs:2 super::a::go\n",
                "c -> d: c/tests.rs:1 crate::d::f (+1 more) [only in #[cfg(test)] code]\n",
                "d -> c: d/real.rs:1 crate::c::h\n",
                "f::x -> f::y: f/x.rs:1 use super::y::Y",
                "f::y -> f::x: f/y.rs:2 crate::f::x::X",
            ],
        )
        expect("clean", [], ["no import cycle"])
        expect(
            "reexport",
            [("files of folder module p", ["p::q", "p::r"])],
            ["p::q -> p::r: p/q.rs:1 super::R", "p::r -> p::q: p/rr.rs:2 super::inline::Q"],
        )

        # A missing module file is an error, not a silent pass.
        os.remove(os.path.join(tmp, "clean", "b", "inner.rs"))
        found, errors, text = run("clean")
        if errors != 1:
            failures.append(f"missing file: want 1 error, got {errors}:\n{text}")

    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"check-imports self-test: {'FAILED' if failures else 'ok'} ({len(FIXTURES)} fixtures)")
    return 1 if failures else 0


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    report_only = "--report-only" in args
    dirs = [a for a in args if a != "--report-only"]
    if not dirs or any(d.startswith("-") for d in dirs):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    cycles = errors = 0
    for d in dirs:
        if not os.path.isdir(d):
            print(f"check-imports: {d}: not a directory", file=sys.stderr)
            return 2
        found, e = check(d)
        cycles, errors = cycles + len(found), errors + e
    if report_only and (cycles or errors):
        print(f"check-imports: report only: {cycles} cycle(s), {errors} error(s) not enforced")
        return 0
    return 1 if cycles or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
