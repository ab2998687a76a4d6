"""Make module_utils/, library/ and bin/ importable as plain modules in unit tests."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("module_utils", "library", "bin"):
    path = os.path.join(ROOT, sub)
    if path not in sys.path:
        sys.path.insert(0, path)

CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
