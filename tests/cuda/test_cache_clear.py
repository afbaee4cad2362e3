"""Clearing a cache that cannot be (fully) cleared: ``clear_cache`` removes what it can and reports every path it
could not remove; ``warpspec cache clear`` prints them and exits 1, without a traceback."""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

from warpspec.cli import main
from warpspec.cuda.compiler import clear_cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache with two compiled kernels and one tuning record."""
    root = tmp_path / "cache"
    for name in ("cubin/a.cubin", "cubin/b.cubin", "tuning/c.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"entry")
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(root))
    return root


@pytest.fixture
def deny(monkeypatch):
    """``deny(folder)`` makes ``folder`` read-only (mode 0o555), ``deny(folder, listing=True)`` also unlistable
    (mode 0). Permissions do not stop root, so for root removing (listing) there fails as it would for others."""
    read_only, unlistable, denied = [], [], []
    real_unlink, real_scandir = os.unlink, os.scandir

    def refuse(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def unlink(path, *args, **kwargs):
        if os.geteuid() == 0 and pathlib.Path(path).parent in read_only:
            refuse(path)
        return real_unlink(path, *args, **kwargs)

    def scandir(path="."):
        if os.geteuid() == 0 and pathlib.Path(path) in unlistable:
            refuse(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "scandir", scandir)

    def make(folder, listing=False):
        folder.chmod(0 if listing else 0o555)
        (unlistable if listing else read_only).append(folder)
        denied.append(folder)

    yield make
    for folder in reversed(denied):  # outer folders first: the inner ones are reached through them
        folder.chmod(0o755)


def test_clear_cache_removes_what_it_can_and_reports_the_rest(cache_dir, deny):
    deny(cache_dir / "cubin")
    failed = []
    assert clear_cache(on_error=lambda path, error: failed.append((path, type(error)))) == 1
    assert sorted(failed) == [(cache_dir / "cubin" / "a.cubin", PermissionError),
                              (cache_dir / "cubin" / "b.cubin", PermissionError)]
    assert sorted(p.name for p in (cache_dir / "cubin").iterdir()) == ["a.cubin", "b.cubin"]
    assert not (cache_dir / "tuning" / "c.json").exists()
    with pytest.warns(RuntimeWarning, match=r"^warpspec could not remove .*/cubin/[ab]\.cubin: Permission denied$"):
        assert clear_cache("cubin") == 0


def test_cache_clear_on_a_read_only_folder_exits_1_and_names_each_failure(cache_dir, deny, capsys):
    deny(cache_dir / "cubin")
    assert main(["cache", "clear"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"cubins: removed 0 entries from {cache_dir / 'cubin'} (2 not removed: see the "
                                f"warnings)", f"tuning: removed 1 entries from {cache_dir / 'tuning'}"]
    assert sorted(err.splitlines()) == [
        f"warpspec cache clear: warning: could not remove {cache_dir / 'cubin' / name}: Permission denied"
        for name in ("a.cubin", "b.cubin")]
    assert "Traceback" not in err
    assert main(["cache", "clear", "--tuning"]) == 0


def test_folders_that_cannot_be_listed_are_reported(cache_dir, deny, capsys):
    deny(cache_dir / "cubin", listing=True)
    assert main(["cache", "clear"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == ["cubins: nothing removed (see the warning)",
                                f"tuning: removed 1 entries from {cache_dir / 'tuning'}"]
    assert err.splitlines() == [(f"warpspec cache clear: warning: could not clear {cache_dir / 'cubin'}: "
                                 f"Permission denied")]
    assert main(["cache", "info"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"cache directory: {cache_dir}",
                                f"tuning: 0 entries, 0.0 MiB in {cache_dir / 'tuning'}"]
    assert err.splitlines() == [(f"warpspec cache info: warning: could not read {cache_dir / 'cubin'}: "
                                 f"Permission denied")]
    deny(cache_dir, listing=True)
    with pytest.warns(RuntimeWarning, match=f"^warpspec could not remove {cache_dir}: Permission denied$"):
        assert clear_cache() == 0
