"""Hostile zip archives through `prices import` and `prices refresh --source gpuhunt` (issue 38):
bombs (many members, huge members, overlapping entries, extreme ratios), members Python cannot
unpack (encrypted, Zstandard, WinZip AES, corrupt deflate) and members that are not CSV text.
Each ends in one line naming the archive and the member (exit 2), or a refused refresh that keeps
the cache; the work done is asserted by counting members unpacked and bytes unpacked
(pricing.files.MEMBERS_OPENED / UNZIPPED_BYTES), never by a stopwatch.

The archives are built byte by byte here (`raw_zip`), so a bomb costs the test what it costs on
disk: the 40 x 60 MiB zip compresses one 60 MiB run of zeros once and repeats its 61 kB."""

from __future__ import annotations

import struct
import zlib

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import files

gpuhunt = pytest.importorskip("gpuhunt")

MIB = 1 << 20
HEADER = ("instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot,disk_size,gpu_vendor,flags,"
          "cpu_arch,provider_data\n")
ROW = "p5.48xlarge,us-east-1,55.04,192,2048.0,8,H100,80.0,False,,nvidia,,x86,{}\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "1")


@pytest.fixture()
def counted():
    """(members unpacked, bytes unpacked) through pricing.files.read_zip while the test runs."""
    start = files.MEMBERS_OPENED[0], files.UNZIPPED_BYTES[0]
    return lambda: (files.MEMBERS_OPENED[0] - start[0], files.UNZIPPED_BYTES[0] - start[1])


def deflated(data: bytes) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    return z.compress(data) + z.flush()


def zeros_deflated(size: int) -> tuple[bytes, int]:
    """(raw deflate of `size` zero bytes, its CRC-32), compressed in 1 MiB steps (no 60 MiB buffer)."""
    z, crc, block = zlib.compressobj(6, zlib.DEFLATED, -15), 0, bytes(MIB)
    parts = []
    for _ in range(size // MIB):
        parts.append(z.compress(block))
        crc = zlib.crc32(block, crc)
    parts.append(z.flush())
    return b"".join(parts), crc


def member(name: str, data: bytes, *, method: int = 8, flags: int = 0, packed: bytes | None = None,
           size: int | None = None, crc: int | None = None) -> dict:
    packed = (deflated(data) if method == 8 else data) if packed is None else packed
    return {"name": name.encode(), "packed": packed, "size": len(data) if size is None else size,
            "crc": zlib.crc32(data) if crc is None else crc, "method": method, "flags": flags}


def raw_zip(members: list[dict], central: list[tuple[str, int]] | None = None) -> bytes:
    """A zip of `members` (local headers and data in order); `central` lists the directory's entries as
    (name, index of the member whose bytes it points at): by default one entry per member."""
    out, offsets = bytearray(), []
    for m in members:
        offsets.append(len(out))
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, m["flags"], m["method"], 0, 0, m["crc"],
                           len(m["packed"]), m["size"], len(m["name"]), 0) + m["name"] + m["packed"]
    start = len(out)
    entries = central or [(m["name"].decode(), i) for i, m in enumerate(members)]
    for name, i in entries:
        m, raw = members[i], name.encode()
        out += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, m["flags"], m["method"], 0, 0, m["crc"],
                           len(m["packed"]), m["size"], len(raw), 0, 0, 0, 0, 0, offsets[i]) + raw
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(out) - start, start, 0)
    return bytes(out)


def catalog_csv(rows: int = 1, extra: str = "{}") -> bytes:
    return (HEADER + "".join(ROW.format(extra) for _ in range(rows))).encode()


def imported(capsys, tmp_path, data: bytes, name: str = "catalog.zip"):
    path = tmp_path / name
    path.write_bytes(data)
    return gpu_advisor(capsys, "prices", "import", str(path)), path


def refused(capsys, tmp_path, data: bytes, *words: str) -> str:
    (code, _, err), path = imported(capsys, tmp_path, data)
    line = one_line_error(code, err)
    assert str(path) in line, line
    for w in words:
        assert w in line, line
    return line


# --------------------------------------------------------------------------- bombs
def test_forty_members_of_60_mib_are_refused_before_one_is_unpacked(capsys, tmp_path, counted):
    packed, crc = zeros_deflated(60 * MIB)  # each member is under the 64 MiB per-member limit
    zeros = [member(f"p{i}.csv", b"", packed=packed, size=60 * MIB, crc=crc) for i in range(40)]
    data = raw_zip(zeros)
    assert len(data) < 3 * MIB  # 2.4 GB unpacked from a 2.4 MB file
    refused(capsys, tmp_path, data, "unpack", "limit for the whole archive")
    assert counted() == (0, 0)


def test_one_member_unpacking_a_thousand_times_its_size_is_refused_by_its_ratio(capsys, tmp_path, counted):
    packed, crc = zeros_deflated(8 * MIB)  # under every size limit: only the ratio gives it away
    line = refused(capsys, tmp_path, raw_zip([member("aws.csv", b"", packed=packed, size=8 * MIB, crc=crc)]),
                   "'aws.csv'", "100 : 1 limit")
    assert "zip bomb" in line and counted() == (0, 0)


def test_a_thousand_entries_pointing_at_one_60_mib_member_are_refused_as_overlapping(capsys, tmp_path, counted):
    packed, crc = zeros_deflated(60 * MIB)
    one = member("aws.csv", b"", packed=packed, size=60 * MIB, crc=crc)
    data = raw_zip([one], central=[(f"dir{i}/aws{i}.csv", 0) for i in range(1_000)])
    assert len(data) < 200_000
    refused(capsys, tmp_path, data, "overlaps member", "zip bomb")
    assert counted() == (0, 0)


def test_members_sharing_part_of_their_bytes_are_refused(capsys, tmp_path, counted):
    body = catalog_csv()
    a = member("a.csv", body)
    data = bytearray(raw_zip([a, member("b.csv", body)]))
    # point b's directory entry into the middle of a's data
    cd = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 42, 10)
    line = refused(capsys, tmp_path, bytes(data))
    assert "'b.csv'" in line or "'a.csv'" in line
    assert counted() == (0, 0)


def test_fifty_thousand_members_are_refused_from_the_end_record_before_listing(capsys, tmp_path, counted,
                                                                                monkeypatch):
    import zipfile

    listed = []
    real = zipfile.ZipFile._RealGetContents
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", lambda self: listed.append(1) or real(self))
    body = catalog_csv()
    data = raw_zip([member(f"p{i}.csv", body, method=0) for i in range(50_000)])
    assert len(data) > 10 * MIB
    refused(capsys, tmp_path, data, "50,000 entries", "1,000 limit")
    assert counted() == (0, 0) and listed == []  # zipfile never walked the 50,000 directory entries


def test_a_member_that_unpacks_past_its_declared_size_stops_at_the_limit(tmp_path, counted):
    packed, crc = zeros_deflated(80 * MIB)  # declares 1 kB
    data = raw_zip([member("aws.csv", b"", packed=packed, size=1_000, crc=crc)])
    with pytest.raises(files.PriceInputError) as err:
        files.read_zip(data, "x.zip", suffix=".csv", max_member_bytes=64 * MIB, max_total_bytes=64 * MIB)
    assert "'aws.csv'" in str(err.value)
    opened, unpacked = counted()
    assert opened == 1 and unpacked <= 64 * MIB + MIB  # never the 80 MiB


# --------------------------------------------------------------------------- members Python cannot unpack
@pytest.mark.parametrize("method,name", [(93, "Zstandard"), (99, "WinZip AES"), (9, "Deflate64"), (98, "PPMd")])
def test_a_member_in_an_unsupported_compression_method_is_named(capsys, tmp_path, counted, method, name):
    data = raw_zip([member("aws.csv", catalog_csv(), method=method, packed=b"\x00" * 64)])
    refused(capsys, tmp_path, data, "'aws.csv'", f"method {method}", name, "re-zip")
    assert counted() == (0, 0)


def test_an_encrypted_member_is_named(capsys, tmp_path, counted):
    data = raw_zip([member("aws.csv", catalog_csv(), flags=0x1)])
    refused(capsys, tmp_path, data, "'aws.csv'", "encrypted")
    assert counted() == (0, 0)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad crc"])
def test_a_corrupt_deflate_stream_is_named(capsys, tmp_path, damage):
    body = catalog_csv(rows=200)
    packed = deflated(body)
    m = {"garbage": member("aws.csv", body, packed=b"\xff" * len(packed)),
         "truncated": member("aws.csv", body, packed=packed[: len(packed) // 2]),
         "bad crc": member("aws.csv", body, crc=zlib.crc32(body) ^ 1)}[damage]
    refused(capsys, tmp_path, raw_zip([m]), "'aws.csv'", "cannot be unpacked")


@pytest.mark.parametrize("inner,kind", [
    (None, "a zip archive"), (b"\x1f\x8b\x08\x00" + bytes(40), "a gzip file"), (b"a,b\x00c\n" * 10, "NUL bytes")])
def test_a_member_named_csv_that_is_not_csv_text_is_named(capsys, tmp_path, inner, kind):
    inner = raw_zip([member("aws.csv", catalog_csv())]) if inner is None else inner
    refused(capsys, tmp_path, raw_zip([member("aws.csv", inner)]), "'aws.csv'", kind, "not CSV text")


def test_a_zip_saved_under_a_csv_name_is_named(capsys, tmp_path):
    (code, _, err), path = imported(capsys, tmp_path, raw_zip([member("aws.csv", catalog_csv())]), "aws.csv")
    line = one_line_error(code, err)
    assert str(path) in line and "zip archive" in line


def test_a_gpuhunt_field_over_the_csv_limit_is_named_not_an_internal_error(capsys, tmp_path):
    body = catalog_csv(extra='"{' + "x" * 140_000 + '}"')
    line = refused(capsys, tmp_path, raw_zip([member("aws.csv", body)]), "aws.csv", "65,536 characters")
    assert "internal error" not in line


def test_not_a_zip_at_all_is_named(capsys, tmp_path):
    refused(capsys, tmp_path, b"PK\x03\x04 but nothing after", "not a readable zip")


# --------------------------------------------------------------------------- what still works
def test_a_real_catalog_zip_with_a_folder_entry_and_a_readme_imports(capsys, tmp_path, counted):
    data = raw_zip([member("docs/", b"", method=0), member("README.txt", b"hello"),
                    member("aws.csv", catalog_csv(rows=3))])
    (code, out, err), _ = imported(capsys, tmp_path, data)
    assert code == 0, err
    assert "imported 1 offers" in out  # three rows of the same instance: one offer
    assert counted()[0] == 1  # only the CSV member was unpacked


def test_a_refresh_from_a_server_sending_a_bomb_fails_and_keeps_the_cache(httpserver, monkeypatch, counted):
    from pricing.refresh import refresh
    from pricing.sources import gpuhunt as source

    monkeypatch.setattr(source, "PROVIDERS", ("aws",))
    packed, crc = zeros_deflated(60 * MIB)
    bomb = raw_zip([member(f"aws{i}.csv", b"", packed=packed, size=60 * MIB, crc=crc) for i in range(40)])
    httpserver.expect_request("/v3/aws/version").respond_with_data("20261128-412")
    httpserver.expect_request("/v3/aws/20261128-412/catalog.zip").respond_with_data(bomb)
    [out] = refresh(["gpuhunt"], endpoint=httpserver.url_for("/v3"))
    assert out.status == "failed" and "limit for the whole archive" in out.message
    assert counted() == (0, 0)


# --------------------------------------------------------------------------- one walk over the entries (issue 50)
def test_a_folder_of_1000_csvs_is_walked_once_and_unpacked_as_zipfile_reads_it(monkeypatch, counted):
    """The 1,000-entry folder zip (the member limit): every local header is read once (the walk that
    checks overlaps finds where each member's bytes start), zipfile.ZipFile.open is never called for
    stored or deflated members, and every byte equals what zipfile itself reads (CRC checked)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("catalogs/", b"")
        for i in range(998):
            method = (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED)[i % 2]
            z.writestr(f"catalogs/p{i}.CSV", catalog_csv(rows=1 + i % 7, extra=f'{{"i": {i}}}'), compress_type=method)
        z.writestr("catalogs/README.txt", b"not a sheet")
    data = buf.getvalue()
    opened = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, *a, **k: opened.append(1) or real_open(self, *a, **k))
    headers = files.LOCAL_HEADERS_READ[0]
    got = files.read_zip(data, "folder.zip", suffix=".csv", max_member_bytes=64 * MIB, max_total_bytes=64 * MIB)
    assert files.LOCAL_HEADERS_READ[0] - headers == 1_000  # one read per entry, folder and README included
    assert opened == [] and counted()[0] == 998
    monkeypatch.setattr(zipfile.ZipFile, "open", real_open)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        want = [(n, z.read(n)) for n in z.namelist() if n.endswith(".CSV")]
    assert got == want


@pytest.mark.parametrize("method", [12, 14])
def test_bzip2_and_lzma_members_still_unpack_through_zipfile(method):
    import io
    import zipfile

    buf, body = io.BytesIO(), catalog_csv(rows=50)
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        z.writestr("aws.csv", body)
    got = files.read_zip(buf.getvalue(), "x.zip", suffix=".csv", max_member_bytes=MIB, max_total_bytes=MIB)
    assert got == [("aws.csv", body)]


def test_a_local_header_naming_another_file_is_refused_when_unpacked(counted):
    data = bytearray(raw_zip([member("aws.csv", catalog_csv()), member("README.txt", b"x")]))
    at = data.index(b"aws.csv")  # the first local header's name; the directory still says aws.csv
    data[at:at + 7] = b"gcp.csv"
    with pytest.raises(files.PriceInputError) as err:
        files.read_zip(bytes(data), "x.zip", suffix=".csv", max_member_bytes=MIB, max_total_bytes=MIB)
    assert "'aws.csv'" in str(err.value) and "cannot be unpacked" in str(err.value)
    assert counted()[0] == 1
    data[at:at + 7] = b"aws.csv"
    at = data.index(b"README.txt")
    data[at:at + 6] = b"NOTE!!"  # a member that is not chosen is never unpacked, so its header is not judged
    assert [n for n, _ in files.read_zip(bytes(data), "x.zip", suffix=".csv", max_member_bytes=MIB,
                                         max_total_bytes=MIB)] == ["aws.csv"]
