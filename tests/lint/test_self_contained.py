"""The tests read nothing outside the repository: a user who clones gpuhost alone has no folder beside it."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A path built from the checkout's parent, the shared corpus beside it, or an absolute /work/... path.
OUTSIDE = re.compile(r"os\.path\.dirname\(ROOT\)|[\"']shared[\"'],\s*[\"']corpus|\.\./shared|[\"']/work/|os\.pardir")


def _python_files(*tops):
    for top in tops:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("fixtures", "__pycache__")]
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def test_no_test_reads_outside_the_repository():
    found = []
    for path in _python_files("tests", "bench"):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if OUTSIDE.search(line) and not line.lstrip().startswith("#"):
                    found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), number, line.strip()))
    assert not found, "\n".join(found)


def test_the_corpus_copy_is_complete():
    """Every file its manifest lists is in the copy (a test that globbed the corpus would silently shrink)."""
    corpus = os.path.join(ROOT, "tests", "fixtures", "corpus")
    with open(os.path.join(corpus, "MANIFEST.tsv"), encoding="utf-8") as handle:
        listed = [line.split("\t")[0] for line in handle.read().splitlines()[1:] if line.strip()]
    assert len(listed) > 100
    missing = [name for name in listed if not os.path.isfile(os.path.join(corpus, name))]
    assert not missing, missing


def test_no_test_skips_for_want_of_the_product():
    """A product module that moved must fail the tests that import it, not make them vanish as skips."""
    ours = set()
    for folder, dirs, files in os.walk(os.path.join(ROOT, "module_utils")):
        ours.update(os.path.splitext(f)[0] for f in files if f.endswith(".py"))
        ours.update(d for d in dirs if d != "__pycache__")
    found = []
    for path in _python_files("tests"):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                for name in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", line):
                    if name.split(".")[0] in ours or name.split(".")[-1] in ours:
                        found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), number, line.strip()))
    assert not found, "\n".join(found)
