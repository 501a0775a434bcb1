"""One source for every figure (issue 32): which commit made each results
file, whether the code it measures changed since, and the Markdown that
quotes it, generated between markers in the documents.

A document marks what it quotes from a results file:

    <!-- report:NAME -->the generated text<!-- /report:NAME -->

NAME is a section (a block: a table) or a figure (inline: one number and
its unit), each defined once in a registry (registry.py beside this has
the project's; bench/report.py is the command). Rewriting puts there what
the results files hold now; checking fails where the text differs, so a
figure cannot outlive its file, nor a status its code, without a test
failing.

Not for: running benchmarks (each bench/*/run.py does) or judging results.
"""
import dataclasses
import difflib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

STATUS_NO_COMMIT = "no commit recorded"
STATUS_NOT_IN_HISTORY = "commit not in history"
STATUS_CURRENT = "current"
STATUS_STALE = "stale"
STATUS_DIRTY = "dirty tree"
# A commit written into the file by hand ("commit": "2ffd952"): whether the
# tree had uncommitted changes is not known.
STATUS_TREE_UNKNOWN = "tree state not recorded"


class ReportError(Exception):
    """A registry, document or results file that cannot be reported on as it is."""


# ---------------------------------------------------------------- registry

@dataclasses.dataclass(frozen=True)
class Benchmark:
    what: str
    command: str  # Markdown, as the table shows it
    results: tuple  # results files (repository paths), each stamped by what made it, or not
    measures: tuple  # git pathspecs of the code and scripts that decide its figures
    outputs: tuple = ()  # other files it writes, named beside the results (pictures)


@dataclasses.dataclass(frozen=True)
class Figure:
    """One number quoted inline: `key` is a dotted path into the results
    file, or a function of the parsed file for a figure derived from
    several keys; `fmt` a format string or a function of the value."""
    results: str
    key: object
    fmt: object = "{}"

    def text(self, doc) -> str:
        value = self.key(doc) if callable(self.key) else lookup(doc, self.key)
        return self.fmt(value) if callable(self.fmt) else self.fmt.format(value)


@dataclasses.dataclass(frozen=True)
class Section:
    """A block of Markdown made from the context (results files, statuses)."""
    make: Callable
    sources: tuple  # the results files it reads, for messages


@dataclasses.dataclass(frozen=True)
class Registry:
    benchmarks: tuple
    sections: dict
    figures: dict
    # JSON under bench/ that is not a benchmark's results file (raw runs,
    # inputs), with the reason: every other one must be registered, so a new
    # results file cannot be quoted without a status.
    not_results: dict = dataclasses.field(default_factory=dict)

    def measures_of(self, results: str) -> tuple:
        for b in self.benchmarks:
            if results in b.results:
                return b.measures
        raise ReportError(f"{results} is not a registered benchmark's results file")


def lookup(doc, key: str):
    """doc["a"]["b"] for key "a.b"; a missing key is an error, never None."""
    value = doc
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ReportError(f"no key {key!r}" + (f" ({part!r} is missing)" if part != key else ""))
        value = value[part]
    return value


# ---------------------------------------------------------------- git

class Git:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._shallow = None

    def run(self, *args, codes=(0,)):
        proc = subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True)
        if proc.returncode not in codes:
            raise ReportError(f"git {' '.join(args)} failed in {self.root}: {proc.stderr.strip()}")
        return proc

    def resolve(self, rev: str):
        """The full hash of a commit, or None where this clone has no such commit."""
        proc = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", codes=(0, 1, 128))
        return proc.stdout.strip() if proc.returncode == 0 else None

    def shallow(self) -> bool:
        if self._shallow is None:
            self._shallow = self.run("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        return self._shallow

    def is_ancestor_of_head(self, sha: str) -> bool:
        return self.run("merge-base", "--is-ancestor", sha, "HEAD", codes=(0, 1)).returncode == 0

    def later(self, sha: str, paths) -> list:
        """Commits after `sha` up to HEAD that touch `paths`, oldest first, as (hash, subject)."""
        out = self.run("log", "--reverse", "--format=%H%x09%s", f"{sha}..HEAD", "--", *paths).stdout
        return [tuple(line.split("\t", 1)) for line in out.splitlines() if line]

    def uncommitted(self, paths) -> list:
        """Files under `paths` changed or new in the working tree (ignored files aside)."""
        out = self.run("status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).stdout
        return sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})

    def differs(self, sha: str, paths) -> bool:
        """Whether the working tree's `paths` differ from `sha`'s: a change made
        and reverted since leaves the measured code as it was."""
        if self.run("diff", "--quiet", sha, "--", *paths, codes=(0, 1)).returncode == 1:
            return True
        return any(line.startswith("??") for line in
                   self.run("status", "--porcelain", "--untracked-files=all", "--", *paths).stdout.splitlines())

    def documents(self) -> list:
        """The Markdown files of the checkout, tracked or new (ignored ones aside)."""
        out = self.run("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md").stdout
        return sorted({p for p in out.split("\0") if p and (self.root / p).is_file()})

    def json_under(self, folder: str) -> list:
        out = self.run("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", f"{folder}/*.json").stdout
        return sorted({p for p in out.split("\0") if p})


# ---------------------------------------------------------------- what made a results file

# What made_by says when the runs of a file came from sittings at several
# commits; its "commits" names them (provenance.combined writes both).
SEVERAL = "several"


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What a results file says made it (or a part of it: `where`)."""
    where: str  # the key holding it: "made_by", "commit", "details.io_uring.made_by"
    commit: object  # as recorded: a full or short hash, or "several"; None when made_by recorded none
    dirty: object  # True, False, or None: not recorded
    date: object  # "2026-11-28", or None
    # The runs' commits where they came from several (None for runs that
    # recorded none); empty for one commit.
    commits: tuple = ()


def stamps(doc) -> list:
    """The whole file's stamp first (where="made_by" or "commit"), then those
    of parts measured apart (a made_by deeper in the file). write_results
    stamps made_by; older files hold a hand-written "commit" or nothing."""
    found = []
    if isinstance(doc, dict):
        top = doc.get("made_by")
        if isinstance(top, dict):
            found.append(_made_by("made_by", top))
        elif isinstance(doc.get("commit"), str):
            found.append(Stamp("commit", doc["commit"], None, None))

    def walk(node, where):
        if isinstance(node, dict):
            for k, v in node.items():
                path = f"{where}.{k}" if where else k
                if k == "made_by" and where and isinstance(v, dict):
                    found.append(_made_by(path, v))
                else:
                    walk(v, path)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(doc, "")
    return found


def _made_by(where, m):
    commit, dirty, date, commits = m.get("commit"), m.get("dirty"), m.get("date"), m.get("commits")
    several = ()
    if isinstance(commits, list) and len(commits) > 1:
        several = tuple(c if isinstance(c, str) and c else None for c in commits)
    return Stamp(where, commit if isinstance(commit, str) and commit else None,
                 dirty if isinstance(dirty, bool) else None, date[:10] if isinstance(date, str) else None, several)


@dataclasses.dataclass(frozen=True)
class Verdict:
    words: tuple  # the status column: ("stale", "dirty tree")
    detail: str  # why, in one line
    current: bool  # what --strict asks of every file
    later: tuple = ()  # the commits after it that touch what it measures: (hash, subject)


def judge(git: Git, stamp, measures) -> Verdict:
    """A stamp against HEAD and the working tree: the tree is what the
    documents describe, so uncommitted changes to measured code count (the
    status written before a commit must hold after it)."""
    if stamp is None or not stamp.commit:
        return Verdict((STATUS_NO_COMMIT,), "the file names no commit that made it", False)
    if stamp.commits:
        return judge_several(git, stamp, measures)
    if stamp.commit == SEVERAL:
        return Verdict((STATUS_NO_COMMIT,), "made by several commits, which the file does not name", False)
    short = stamp.commit[:7]
    # A hash only: "HEAD" or a branch name would resolve to whatever is there now.
    if not re.fullmatch(r"[0-9a-f]{4,40}", stamp.commit):
        return Verdict((STATUS_NOT_IN_HISTORY,), f"made by {stamp.commit!r}, which is not a commit's hash", False)
    sha = git.resolve(stamp.commit)
    if sha is None:
        why = ("this clone is shallow: `git fetch --unshallow` brings the history" if git.shallow()
               else "this repository has no such commit")
        return Verdict((STATUS_NOT_IN_HISTORY,), f"made by {short}, but {why}", False)
    if not git.is_ancestor_of_head(sha):
        return Verdict((STATUS_NOT_IN_HISTORY,),
                       f"made by {short}, which HEAD does not contain (a branch not merged, or rewritten)", False)
    later = git.later(sha, measures)
    pending = git.uncommitted(measures)
    changed = git.differs(sha, measures)
    words, why = [], []
    if changed:
        words.append(STATUS_STALE)
        if later:
            n = len(later)
            subject = later[0][1] if len(later[0][1]) <= 72 else later[0][1][:71] + "…"
            why.append(f"{n} later commit{'s' if n > 1 else ''} touch{'' if n > 1 else 'es'} what it measures, "
                       f"the first {later[0][0][:7]} \"{subject}\"")
        if pending:
            why.append(f"uncommitted changes to {', '.join(pending[:3])}{' …' if len(pending) > 3 else ''}")
    elif later:
        why.append(f"{len(later)} later commits touched what it measures and left it as at {short}")
    if stamp.dirty:
        words.append(STATUS_DIRTY)
        why.append(f"made from a tree with uncommitted changes at {short}")
    elif stamp.dirty is None:
        words.append(STATUS_TREE_UNKNOWN)
        why.append(f"{short} written by hand, without whether the tree was clean")
    if not words:
        words.append(STATUS_CURRENT)
    return Verdict(tuple(words), "; ".join(why) or f"made by {short}, nothing it measures changed since",
                   words == [STATUS_CURRENT], tuple(later))


def judge_several(git: Git, stamp, measures) -> Verdict:
    """Runs from several commits: current only when every commit's runs are
    (the code each measured is as it is now); the status words of each, else."""
    verdicts = [(c, judge(git, Stamp(stamp.where, c, False, stamp.date), measures)) for c in stamp.commits]
    words = list(dict.fromkeys(w for _, v in verdicts for w in v.words if w != STATUS_CURRENT))
    why = [f"{c[:7] if c else 'runs without a record'}: " + ", ".join(v.words)
           + ("" if v.current else f" ({v.detail})") for c, v in verdicts]
    if stamp.dirty:
        words.append(STATUS_DIRTY)
        why.append("a sitting's tree had uncommitted changes")
    elif stamp.dirty is None and all(stamp.commits):
        words.append(STATUS_TREE_UNKNOWN)
        why.append("a sitting did not record whether its tree was clean")
    later = tuple(dict.fromkeys(x for _, v in verdicts for x in v.later))
    return Verdict(tuple(words or [STATUS_CURRENT]), f"runs from {len(verdicts)} commits: " + "; ".join(why),
                   not words, later)


def measured_at(stamp) -> str:
    if stamp is None or not stamp.commit:
        return "not recorded"
    if stamp.commits:
        return "several: " + ", ".join(f"`{c[:7]}`" if c else "not recorded" for c in stamp.commits) + \
            (f", {stamp.date}" if stamp.date else "")
    return f"`{stamp.commit[:7]}`" + (f", {stamp.date}" if stamp.date else "")


@dataclasses.dataclass(frozen=True)
class FileStatus:
    path: str
    stamp: object  # the whole file's Stamp, or None
    verdict: Verdict
    parts: tuple  # (Stamp, Verdict) of parts measured apart


# ---------------------------------------------------------------- context

class Context:
    """What sections and figures read: the results files, parsed once, and
    their statuses."""

    def __init__(self, root: Path, registry: Registry):
        self.root = Path(root)
        self.registry = registry
        self.git = Git(root)
        self._docs = {}
        self._statuses = {}

    def load(self, path: str):
        if path not in self._docs:
            f = self.root / path
            if not f.is_file():
                raise ReportError(f"{path} is missing")
            try:
                self._docs[path] = json.loads(f.read_text())
            except json.JSONDecodeError as e:
                raise ReportError(f"{path} is not JSON: {e}") from None
        return self._docs[path]

    def status(self, path: str) -> FileStatus:
        if path not in self._statuses:
            measures = self.registry.measures_of(path)
            found = stamps(self.load(path))
            whole = next((s for s in found if s.where in ("made_by", "commit")), None)
            parts = tuple((s, judge(self.git, s, measures)) for s in found if s is not whole)
            self._statuses[path] = FileStatus(path, whole, judge(self.git, whole, measures), parts)
        return self._statuses[path]

    def statuses(self) -> list:
        return [self.status(p) for b in self.registry.benchmarks for p in b.results]


# ---------------------------------------------------------------- the benchmark table

def _per_file(b: Benchmark, cell: Callable) -> str:
    """One text for all of a benchmark's files when they agree, else one per file."""
    texts = [cell(p) for p in b.results]
    if len(set(texts)) == 1:
        return texts[0]
    return "; ".join(f"`{Path(p).name}`: {t}" for p, t in zip(b.results, texts))


def _with_parts(status: FileStatus, whole: str, part: Callable) -> str:
    return whole + "".join(f"; `{s.where.removesuffix('.made_by')}`: {part(s, v)}" for s, v in status.parts)


def benchmark_table(ctx: Context) -> str:
    rows = ["| benchmark | command | results | measured at | status |", "|---|---|---|---|---|"]
    for b in ctx.registry.benchmarks:
        first = Path(b.results[0])
        named = [f"`{b.results[0]}`"] + [f"`{p}`" if Path(p).parent != first.parent else f"`{Path(p).name}`"
                                         for p in (*b.results[1:], *b.outputs)]
        at = _per_file(b, lambda p: _with_parts(ctx.status(p), measured_at(ctx.status(p).stamp),
                                                lambda s, v: measured_at(s)))
        status = _per_file(b, lambda p: _with_parts(ctx.status(p), ", ".join(ctx.status(p).verdict.words),
                                                    lambda s, v: ", ".join(v.words)))
        rows.append(f"| {b.what} | {b.command} | {', '.join(named)} | {at} | {status} |")
    return "\n".join(rows)


# ---------------------------------------------------------------- markers in documents

MARKER = re.compile(r"<!-- (/?)report:([A-Za-z0-9_.-]+) -->")


@dataclasses.dataclass(frozen=True)
class Span:
    path: str
    name: str
    line: int
    start: int  # the body's first character
    end: int  # one past its last


def spans(text: str, path: str) -> list:
    found, open_ = [], None
    for m in MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not closing:
            if open_:
                raise ReportError(f"{path}:{line}: report:{name} opens inside report:{open_[0]} "
                                  f"(opened on line {open_[1]}); markers do not nest")
            open_ = (name, line, m.end())
        elif not open_ or open_[0] != name:
            raise ReportError(f"{path}:{line}: /report:{name} closes "
                              + (f"report:{open_[0]} (opened on line {open_[1]})" if open_ else "nothing"))
        else:
            found.append(Span(path, name, open_[1], open_[2], m.start()))
            open_ = None
    if open_:
        raise ReportError(f"{path}:{open_[1]}: report:{open_[0]} is never closed (<!-- /report:{open_[0]} -->)")
    return found


def generate(ctx: Context, name: str, where: str) -> str:
    """The text between a marker pair: a section on lines of its own, a
    figure inline."""
    reg = ctx.registry
    # A results file without a key a figure reads is the file's fault, not
    # the tool's: said with the marker's place, not as a traceback.
    if name in reg.sections:
        try:
            return "\n" + reg.sections[name].make(ctx).strip("\n") + "\n"
        except (KeyError, IndexError, TypeError, ValueError, StopIteration, ReportError) as e:
            raise ReportError(f"{where}: section {name} cannot be made from "
                              f"{', '.join(reg.sections[name].sources)}: {type(e).__name__}: {e}") from None
    if name in reg.figures:
        fig = reg.figures[name]
        try:
            return fig.text(ctx.load(fig.results))
        except (KeyError, IndexError, TypeError, ValueError, StopIteration, ReportError) as e:
            raise ReportError(f"{where}: figure {name} cannot be read from {fig.results}: "
                              f"{'' if isinstance(e, ReportError) else type(e).__name__ + ': '}{e}") from None
    raise ReportError(f"{where}: report:{name} names no section or figure of the registry "
                      f"(bench/harness/custos_bench/registry.py)")


@dataclasses.dataclass(frozen=True)
class Difference:
    span: Span
    now: str  # what the document says
    generated: str

    def message(self, ctx: Context) -> str:
        where = f"{self.span.path}:{self.span.line}"
        reg = ctx.registry
        if self.span.name in reg.figures:
            fig = reg.figures[self.span.name]
            key = fig.key if isinstance(fig.key, str) else "(derived)"
            return (f"{where}: figure {self.span.name} says {self.now!r}, "
                    f"but {fig.results} {key} gives {self.generated!r}")
        diff = difflib.unified_diff(self.now.strip("\n").splitlines(), self.generated.strip("\n").splitlines(),
                                    "in the document", "generated now", lineterm="", n=0)
        sources = reg.sections[self.span.name].sources
        made_from = ", ".join(sources) if len(sources) <= 2 else "the results files and the history"
        return f"{where}: section {self.span.name} differs from what {made_from} give now:\n  " + "\n  ".join(diff)


@dataclasses.dataclass
class Plan:
    """Every marker of every document, what it says and what it should."""
    differences: list
    rewritten: dict  # path → the document's new text, for those that change
    used: set  # names found in the documents


def plan(ctx: Context) -> Plan:
    """Everything generated and checked before anything is written: one bad
    marker or results file stops the whole rewrite."""
    differences, rewritten, used, errors = [], {}, set(), []
    for path in ctx.git.documents():
        text = (ctx.root / path).read_text()
        try:
            found = spans(text, path)
        except ReportError as e:
            errors.append(str(e))
            continue
        pieces, last = [], 0
        for s in found:
            used.add(s.name)
            try:
                new = generate(ctx, s.name, f"{path}:{s.line}")
            except ReportError as e:
                errors.append(str(e))
                continue
            old = text[s.start:s.end]
            if old != new:
                differences.append(Difference(s, old, new))
            pieces += [text[last:s.start], new]
            last = s.end
        pieces.append(text[last:])
        if "".join(pieces) != text:
            rewritten[path] = "".join(pieces)
    unused = sorted((set(ctx.registry.sections) | set(ctx.registry.figures)) - used)
    if unused:
        errors.append(f"registered but quoted by no document (a marker lost in an edit?): {', '.join(unused)}")
    errors += registry_errors(ctx)
    if errors:
        raise ReportError("\n".join(errors))
    return Plan(differences, rewritten, used)


def registry_errors(ctx: Context) -> list:
    """Results files the registry does not know, or names that do not exist."""
    reg, errors = ctx.registry, []
    registered = {p for b in reg.benchmarks for p in b.results}
    for b in reg.benchmarks:
        for p in b.results:
            if not (ctx.root / p).is_file():
                errors.append(f"{p} (results of \"{b.what}\") is missing")
        if not b.measures:
            errors.append(f"\"{b.what}\" names no code it measures")
    for name, fig in reg.figures.items():
        if fig.results not in registered:
            errors.append(f"figure {name} reads {fig.results}, which is no registered benchmark's results file")
    for name, sec in reg.sections.items():
        for p in sec.sources:
            if p not in registered:
                errors.append(f"section {name} reads {p}, which is no registered benchmark's results file")
    for p in ctx.git.json_under("bench"):
        if p not in registered and not any(p == k or p.startswith(k.rstrip("/") + "/") for k in reg.not_results):
            errors.append(f"{p}: a JSON file under bench/ that the registry neither lists as a benchmark's "
                          f"results nor as not results (bench/report.py)")
    return errors


def write_atomically(path: Path, text: str):
    """A crash leaves the old document or the new one, never half of each."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rewrite(ctx: Context) -> list:
    """Rewrites every document whose generated text changed; returns their paths."""
    p = plan(ctx)
    for path, text in p.rewritten.items():
        write_atomically(ctx.root / path, text)
    return sorted(p.rewritten)


def check(ctx: Context) -> list:
    """Messages, one per marker whose text differs from what would be generated now."""
    out = [d.message(ctx) for d in plan(ctx).differences]
    if out:
        out.append("the documents differ from the results files; `python bench/report.py` rewrites them")
    shallow = [st.path for st in ctx.statuses() if ctx.git.shallow() and any(
        STATUS_NOT_IN_HISTORY in v.words for v in (st.verdict, *(v for _, v in st.parts)))]
    if out and shallow:
        out.append(f"this clone is shallow, and lacks the commits that made {', '.join(shallow)}: their status "
                   f"cannot be known here (`git fetch --unshallow`, then check again)")
    return out


def strict(ctx: Context) -> list:
    """Messages, one per results file (or part) that is not current."""
    out = []
    for st in ctx.statuses():
        if not st.verdict.current:
            out.append(f"{st.path}: {', '.join(st.verdict.words)}: {st.verdict.detail}")
        for s, v in st.parts:
            if not v.current:
                out.append(f"{st.path} {s.where}: {', '.join(v.words)}: {v.detail}")
    return out


def status_rows(ctx: Context) -> list:
    """(file, measured at, status, why) for the terminal."""
    rows = []
    for st in ctx.statuses():
        rows.append((st.path, measured_at(st.stamp).replace("`", ""), ", ".join(st.verdict.words), st.verdict.detail))
        for s, v in st.parts:
            rows.append((f"  {s.where}", measured_at(s).replace("`", ""), ", ".join(v.words), v.detail))
    return rows
