"""Each error-table row in its real phrasings: tests/fixtures/errors/phrasings/ holds texts people pasted in public
issue threads (other driver releases, distributions, init systems, locales, tools), one per file, each cited in
tests/fixtures/README.md. A file's name says the row it belongs to (`<kind>-NNN.txt`), decided from the text's
meaning and its thread's resolution; `gpuhost explain` must name that row first."""
import os
import re

import pytest

from diagnosis import error_catalogue as catalogue
from diagnosis import explain as ex
from conftest import FIXTURES

PHRASINGS = os.path.join(FIXTURES, "errors", "phrasings")
NAME = re.compile(r"^([a-z0-9_]+)-(\d{3})\.txt$")
FILES = sorted(os.listdir(PHRASINGS))
KINDS = {entry["kind"] for entry in catalogue.ENTRIES}


def test_every_file_names_a_row_and_is_cited():
    with open(os.path.join(FIXTURES, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    assert FILES
    for name in FILES:
        match = NAME.match(name)
        assert match and match.group(1) in KINDS, name
        assert "`%s`" % name in readme, name


@pytest.mark.parametrize("name", FILES)
def test_explain_names_the_row_of_each_real_phrasing(name):
    kind = NAME.match(name).group(1)
    with open(os.path.join(PHRASINGS, name), "rb") as handle:
        data = handle.read()
    findings = ex.explain(data)["findings"]
    assert findings and findings[0]["kind"] == kind, [(f["kind"], f["quote"]) for f in findings]
    # the decisive line is quoted from the text itself
    assert findings[0]["quote"] and findings[0]["quote"].encode() in data
