"""A zip whose members are stored, not deflated, shows its first CSV's header in its first bytes: `prices import`
must still read it as an archive (its member bound, its member names), never hand it to the sheet parser as a
sheet in our schema (which refused it as "--prices: unsupported file type", an option the user never typed)."""

from __future__ import annotations

import zipfile

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import files

pytest.importorskip("gpuhunt")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def _stored_zip(path, members: int):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for i in range(members):
            z.writestr(f"d/f{i}.csv", "provider,instance_type,gpu_model,gpu_count,price_hour\n")
    assert b"gpu_model" in path.read_bytes()[:200]  # the premise: the header is visible in the archive's first line
    return path


@pytest.mark.parametrize("name", ["catalog.zip", "folder.zip"])
def test_a_stored_zip_over_the_member_bound_is_refused_as_an_archive(tmp_path, capsys, name):
    path = _stored_zip(tmp_path / name, files.MAX_ZIP_MEMBERS + 1)
    opened = files.MEMBERS_OPENED[0]
    line = one_line_error(*gpu_advisor(capsys, "prices", "import", path)[::2])
    assert str(files.MAX_ZIP_MEMBERS) in line.replace(",", "") and name in line
    assert "--prices" not in line  # `prices import` has no such option
    assert files.MEMBERS_OPENED[0] == opened  # refused before one member was unpacked
