"""bench/report.py: what made each results file and whether the code it
measures changed since, in real git repositories; the documents' marked
figures rewritten and checked; and the repository's own documents against
its results files (what keeps the README honest at every commit)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from custos_bench import provenance, report
from custos_bench.report import Benchmark, Figure, Registry, Section

ROOT = Path(__file__).resolve().parents[3]
RESULTS = "bench/b/results.json"

REGISTRY = Registry(
    benchmarks=(Benchmark("the thing", "`bench/b/run.py`", (RESULTS,), ("src", "bench/b/run.py")),),
    sections={"benchmarks": Section(report.benchmark_table, (RESULTS,))},
    figures={"b.latency": Figure(RESULTS, "latency_ms", "{:.1f} ms")},
)

DOC = """# The thing

<!-- report:benchmarks -->
<!-- /report:benchmarks -->

It answers in <!-- report:b.latency --><!-- /report:b.latency -->.
"""


class Repo:
    def __init__(self, path: Path):
        self.path = path
        path.mkdir()
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.name", "t")
        self.git("config", "user.email", "t@example.invalid")

    def git(self, *args):
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True, text=True).stdout.strip()

    def write(self, **files):
        """src__loop_c="..." writes src/loop.c (keywords cannot hold / or .)."""
        for name, text in files.items():
            name = name.replace("__", "/")
            if "." not in name.rsplit("/", 1)[-1]:
                head, _, ext = name.rpartition("_")
                name = f"{head}.{ext}"
            f = self.path / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)

    def commit(self, message, **files):
        self.write(**files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def results(self, made_by=None, **figures):
        doc = {"latency_ms": 12.25, **figures}
        if made_by is not None:
            doc["made_by"] = made_by
        self.write(**{RESULTS.replace("/", "__"): json.dumps(doc)})

    def context(self, registry=REGISTRY):
        return report.Context(self.path, registry)

    def status(self):
        return self.context().status(RESULTS)


def stamp(commit, dirty=False):
    return {"commit": commit, "dirty": dirty, "date": "2026-11-30T10:00:00+00:00", "host_kernel": "6.18"}


@pytest.fixture
def repo(tmp_path):
    r = Repo(tmp_path / "repo")
    made = r.commit("the code", src__loop_c="int loop;\n", other__notes_txt="notes\n", bench__b__run_py="# run\n",
                    README_md=DOC)
    r.results(stamp(made))
    r.commit("bench/b: results")
    r.made = made
    return r


def test_current_until_a_commit_changes_what_it_measures(repo):
    st = repo.status()
    assert st.verdict.words == ("current",) and st.verdict.current
    assert report.measured_at(st.stamp) == f"`{repo.made[:7]}`, 2026-11-30"
    # A change elsewhere leaves it current.
    repo.commit("notes: a typo", other__notes_txt="notes.\n")
    assert repo.status().verdict.words == ("current",)
    first = repo.commit("loop: unrolled", src__loop_c="int loop[4];\n")
    repo.commit("run.py: five rounds", bench__b__run_py="# run, 5 rounds\n")
    v = repo.status().verdict
    assert v.words == ("stale",) and not v.current
    assert [h for h, _ in v.later] == [first, repo.git("rev-parse", "HEAD")]
    assert f'2 later commits touch what it measures, the first {first[:7]} "loop: unrolled"' in v.detail


def test_a_change_reverted_leaves_it_current(repo):
    repo.commit("loop: unrolled", src__loop_c="int loop[4];\n")
    repo.commit("loop: back", src__loop_c="int loop;\n")
    v = repo.status().verdict
    assert v.words == ("current",) and "2 later commits touched what it measures and left it" in v.detail


def test_uncommitted_changes_count_so_a_status_written_before_a_commit_holds_after_it(repo):
    repo.write(src__loop_c="int loop[4];\n")
    v = repo.status().verdict
    assert v.words == ("stale",) and "uncommitted changes to src/loop.c" in v.detail
    # Regenerated before the commit, checked after it: the same text.
    report.rewrite(repo.context())
    repo.commit("loop: unrolled, README regenerated")
    assert report.check(repo.context()) == []
    assert "| stale |" in (repo.path / "README.md").read_text()
    # A new file, not yet added, is a change too; an ignored one is not.
    repo.results(stamp(repo.git("rev-parse", "HEAD")))
    repo.commit("bench/b: results again")
    repo.write(_gitignore="*.o\n", src__loop_o="obj")
    repo.commit("ignore objects")
    repo.results(stamp(repo.git("rev-parse", "HEAD")))
    assert repo.status().verdict.words == ("current",)
    repo.write(src__new_c="int n;\n")
    assert "uncommitted changes to src/new.c" in repo.status().verdict.detail


def test_every_kind_of_stamp(repo):
    repo.results(stamp(repo.made, dirty=True))
    assert repo.status().verdict.words == ("dirty tree",)
    repo.results()
    st = repo.status()
    assert st.stamp is None and st.verdict.words == ("no commit recorded",)
    assert report.measured_at(st.stamp) == "not recorded"
    repo.results({"commit": None, "dirty": False, "date": "2026-11-30"})
    assert repo.status().verdict.words == ("no commit recorded",)
    # A hash written by hand: the commit is known, the tree's state is not.
    repo.results(commit=repo.made[:7])
    assert repo.status().verdict.words == ("tree state not recorded",)
    for missing, why in (("0123456789abcdef0123456789abcdef01234567", "no such commit"),
                         ("HEAD", "not a commit's hash")):
        repo.results(stamp(missing))
        v = repo.status().verdict
        assert v.words == ("commit not in history",) and why in v.detail
    # A part measured apart, in an older file without a stamp of its own.
    repo.results(details={"io_uring": {"made_by": stamp(repo.made), "ratio": 1.7}})
    st = repo.status()
    assert st.verdict.words == ("no commit recorded",)
    [(part, v)] = st.parts
    assert part.where == "details.io_uring.made_by" and v.words == ("current",)
    assert "`details.io_uring`: current" in report.benchmark_table(repo.context())


def sittings(*commits, dirty=False):
    """made_by of a file whose runs came from sittings at `commits`, as write_results writes it."""
    return provenance.combined([None if c is None else stamp(c, dirty) for c in commits])


def test_runs_from_several_commits_are_current_only_when_every_commits_runs_are(repo):
    notes = repo.commit("notes: a typo", other__notes_txt="notes.\n")
    repo.results(sittings(repo.made, notes))
    st = repo.status()
    # Nothing measured changed between them: both sittings measured today's code.
    assert st.verdict.words == ("current",) and st.verdict.current
    assert report.measured_at(st.stamp) == f"several: `{repo.made[:7]}`, `{notes[:7]}`, 2026-11-30"
    fixed = repo.commit("loop: fixed", src__loop_c="int loop[2];\n")
    repo.results(sittings(repo.made, fixed))
    v = repo.status().verdict
    assert v.words == ("stale",) and not v.current
    assert v.detail.startswith(f"runs from 2 commits: {repo.made[:7]}: stale (1 later commit touches what it measures")
    assert v.detail.endswith(f"; {fixed[:7]}: current")
    [message] = report.strict(repo.context())
    assert message.startswith(f"{RESULTS}: stale: runs from 2 commits")
    # Both made again after the fix: current.
    repo.results(sittings(fixed, fixed))
    assert repo.status().verdict.words == ("current",)
    # A sitting's tree with uncommitted changes, and runs from before sittings were recorded.
    repo.results(sittings(repo.made, fixed, dirty=True))
    assert repo.status().verdict.words == ("stale", "dirty tree")
    repo.results(sittings(None, fixed))
    st = repo.status()
    assert st.verdict.words == ("no commit recorded",) and "runs without a record: no commit recorded" in st.verdict.detail
    assert report.measured_at(st.stamp) == f"several: not recorded, `{fixed[:7]}`, 2026-11-30"
    # "several" that names none of them.
    repo.results({"commit": "several", "dirty": False, "date": "2026-11-30"})
    v = repo.status().verdict
    assert v.words == ("no commit recorded",) and "does not name" in v.detail


def test_a_commit_on_a_branch_not_merged(repo):
    repo.git("checkout", "-q", "-b", "side")
    side = repo.commit("side: an experiment", src__loop_c="int side;\n")
    repo.git("checkout", "-q", "main")
    repo.results(stamp(side))
    v = repo.status().verdict
    assert v.words == ("commit not in history",) and "HEAD does not contain" in v.detail


def test_a_shallow_clone_says_so(repo, tmp_path):
    repo.commit("notes", other__notes_txt="more\n")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo.path}", str(clone)], check=True)
    ctx = report.Context(clone, REGISTRY)
    v = ctx.status(RESULTS).verdict
    assert v.words == ("commit not in history",) and "shallow" in v.detail and "--unshallow" in v.detail
    # --check says why the table differs.
    assert f"this clone is shallow, and lacks the commits that made {RESULTS}" in report.check(ctx)[-1]


def test_rewrite_then_check_and_a_figure_edited_by_hand(repo):
    ctx = repo.context()
    differences = report.check(ctx)
    assert len(differences) == 3 and "README.md:3: section benchmarks differs" in differences[0]
    assert "`python bench/report.py` rewrites them" in differences[2]
    assert report.rewrite(ctx) == ["README.md"]
    text = (repo.path / "README.md").read_text()
    assert "It answers in <!-- report:b.latency -->12.2 ms<!-- /report:b.latency -->." in text
    assert f"| the thing | `bench/b/run.py` | `{RESULTS}` | `{repo.made[:7]}`, 2026-11-30 | current |" in text
    assert report.check(repo.context()) == []
    # A figure the results file does not hold fails, naming where and what.
    (repo.path / "README.md").write_text(text.replace("12.2 ms", "9.8 ms"))
    message, _ = report.check(repo.context())
    assert message == ("README.md:9: figure b.latency says '9.8 ms', "
                       f"but {RESULTS} latency_ms gives '12.2 ms'")
    report.rewrite(repo.context())
    assert (repo.path / "README.md").read_text() == text
    # New results: the figure follows.
    repo.results(stamp(repo.made), latency_ms=7.0)
    assert "gives '7.0 ms'" in report.check(repo.context())[0]


@pytest.mark.parametrize("bad, error", [
    ("<!-- report:b.latency -->x", "README.md:7: report:b.latency is never closed"),
    ("<!-- report:b.latency --><!-- report:benchmarks --><!-- /report:benchmarks -->",
     "README.md:7: report:benchmarks opens inside report:b.latency"),
    ("x\n<!-- /report:b.latency -->", "README.md:8: /report:b.latency closes nothing"),
    ("<!-- report:b.speed --><!-- /report:b.speed -->", "README.md:7: report:b.speed names no section or figure"),
])
def test_a_bad_marker_stops_the_rewrite_before_anything_is_written(repo, bad, error):
    repo.write(docs__ok_md="<!-- report:b.latency --><!-- /report:b.latency -->\n", README_md=DOC + bad + "\n")
    with pytest.raises(report.ReportError, match=error):
        report.rewrite(repo.context())
    assert (repo.path / "docs/ok.md").read_text() == "<!-- report:b.latency --><!-- /report:b.latency -->\n"


def test_a_results_file_without_the_key_is_named(repo):
    repo.write(**{RESULTS.replace("/", "__"): json.dumps({"made_by": stamp(repo.made)})})
    with pytest.raises(report.ReportError, match=f"README.md:6: figure b.latency cannot be read from {RESULTS}: "
                                                 "no key 'latency_ms'"):
        report.check(repo.context())


def test_every_results_file_and_every_figure_is_accounted_for(repo):
    repo.write(bench__c__results_json="{}")
    with pytest.raises(report.ReportError, match="bench/c/results.json: a JSON file under bench/ that the registry"):
        report.check(repo.context())
    (repo.path / "bench/c/results.json").unlink()
    repo.write(README_md="# nothing quoted\n")
    with pytest.raises(report.ReportError, match="quoted by no document.*b.latency, benchmarks"):
        report.check(repo.context())


def test_strict_fails_on_a_stale_file(repo):
    report.rewrite(repo.context())
    assert report.strict(repo.context()) == []
    first = repo.commit("loop: unrolled", src__loop_c="int loop[4];\n")
    [message] = report.strict(repo.context())
    assert message.startswith(f"{RESULTS}: stale: 1 later commit touches what it measures, the first {first[:7]}")


def test_writing_is_atomic_and_keeps_the_mode(tmp_path):
    f = tmp_path / "a.md"
    f.write_text("old")
    f.chmod(0o640)
    report.write_atomically(f, "new")
    assert f.read_text() == "new" and (f.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["a.md"]


def test_the_repository_documents_match_its_results_files():
    """The README and docs quote only what the results files hold, with the
    status the history gives them now (`python bench/report.py` rewrites them)."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--check", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr
