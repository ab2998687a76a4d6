"""Report directories of concurrent runs and backups (module_utils/atomic_file): never shared, never in the way."""
import multiprocessing
import os

from runs import atomic_file


def _take(args):
    path, queue = args
    queue.put(atomic_file.new_run_dir(path))


def test_runs_of_the_same_second_get_directories_of_their_own(tmp_path):
    path = str(tmp_path / "reports" / "drift-20261204T081500Z")
    manager = multiprocessing.Manager()
    queue = manager.Queue()
    with multiprocessing.Pool(4) as pool:
        pool.map(_take, [(path, queue)] * 8)
    taken = sorted(queue.get() for _ in range(8))
    assert len(set(taken)) == 8
    assert taken[0] == path and set(taken[1:]) == set("%s-%d" % (path, n) for n in range(2, 9))
    assert all(os.path.isdir(p) for p in taken)


def test_an_existing_directory_is_never_reused(tmp_path):
    path = tmp_path / "diagnose-20261204T081500Z"
    path.mkdir()
    (path / "summary.md").write_text("earlier run")
    assert atomic_file.new_run_dir(str(path)) == str(path) + "-2"
    assert (path / "summary.md").read_text() == "earlier run"


def test_backups_mirror_the_path_outside_its_directory_and_never_replace_each_other(tmp_path):
    original = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    original.parent.mkdir(parents=True)
    original.write_text("cdiVersion: 0.5.0\n")
    os.chmod(original, 0o640)
    backups = str(tmp_path / "var" / "backups" / "gpuhost")
    first = atomic_file.backup_copy(str(original), backups)
    original.write_text("cdiVersion: 0.6.0\n")
    second = atomic_file.backup_copy(str(original), backups)
    assert first.startswith(backups + str(original) + ".") and first.endswith("Z")
    assert second != first and open(first).read() == "cdiVersion: 0.5.0\n"
    assert open(second).read() == "cdiVersion: 0.6.0\n"
    assert os.stat(first).st_mode & 0o777 == 0o640
    # Nothing new in the directory CDI reads: a second spec there would be read as one.
    assert os.listdir(original.parent) == ["nvidia.yaml"]
