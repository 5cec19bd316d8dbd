"""SkyPilot catalog importer on the reference extracts, and the bundled snapshot built from them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pricing.sources import skypilot

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "tests" / "data" / "skypilot_catalog"  # SkyPilot catalog extracts (see PROVENANCE.md there)


@pytest.fixture(scope="module")
def imported():
    df, problems = skypilot.import_path(CATALOG, fetched_at="2026-11-30T00:00:00Z")
    return df, problems


def one(df, **eq):
    sel = df
    for k, v in eq.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, (eq, len(sel))
    return sel.iloc[0]


def test_azure_nd96isr_h100_has_eight_gpus_not_twelve(imported):
    df, _ = imported
    row = df[(df.instance_type == "Standard_ND96isr_H100_v5")].iloc[0]
    assert row.gpu_count == 8 and row.gpu_model == "H100"
    assert row.spot_price_hour != row.spot_price_hour  # SpotPrice == Price: not a real spot
    assert "spot_suspect" in row.notes


def test_gcp_gpu_vm_price_is_host_plus_gpus_in_the_same_region(imported):
    df, _ = imported
    # §10: us-central1 a3-highgpu-1g = 4.20076 (H100 x1) + 1.18251 (host)
    row = one(df, provider="gcp", instance_type="a3-highgpu-1g", region="us-central1")
    assert row.price_hour == pytest.approx(4.20076 + 1.18251)
    assert row.gpu_model == "H100" and row.vcpus > 0
    # us-central1 GPU spot (5.3387) is above on-demand there: flagged, not used
    assert row.spot_price_hour != row.spot_price_hour and "spot_suspect" in row.notes


def test_gcp_host_with_zero_price_is_missing_not_free(imported):
    df, problems = imported
    a4 = df[(df.provider == "gcp") & (df.instance_type == "a4-highgpu-8g")]
    assert a4.price_hour.isna().all()  # host price 0.0 = unknown -> no on-demand price
    assert not (df.price_hour == 0).any() and not (df.spot_price_hour == 0).any()


def test_gcp_attachable_gpus_are_gpu_only_prices_flagged(imported):
    df, _ = imported
    t4 = df[(df.provider == "gcp") & (df.gpu_model == "T4")]
    assert len(t4) and t4.instance_type.str.startswith("n1+").all()
    assert t4.notes.str.contains("gpu_only_price").all()


def test_runpod_gb_in_mib_field_and_vast_totals_do_not_leak_into_memory(imported):
    df, _ = imported
    assert set(df[df.provider == "runpod"].groupby("gpu_model").gpu_memory_gb.first().items()) >= {
        ("H100", 80.0), ("H200", 141.0), ("MI300X", 192.0)}
    vast = df[df.provider == "vast"]
    assert one(vast, instance_type="8x-H100_SXM-32-65536", region=vast[vast.instance_type ==
               "8x-H100_SXM-32-65536"].region.iloc[0]).gpu_memory_gb == 80
    assert set(vast[vast.instance_type == "1x-H100_NVL-32-65536"].gpu_model) == {"H100-NVL"}
    # host specs: SkyPilot's rounded-down ("chunked") figures, the floor its launch asks Vast for
    assert (vast.vcpus == 32).all() and (vast.ram_gb == 64).all()


def test_a100_labels_are_split_by_memory_and_form_factor(imported):
    df, _ = imported
    assert set(df[df.instance_type.str.startswith("epyc-genoa-a100-pcie")].gpu_model) == {"A100-80GB-PCIE"}
    assert set(df[df.instance_type == "p4d.24xlarge"].gpu_model) == {"A100"}
    assert set(df[df.instance_type == "1x_A100-80GB_SECURE"].gpu_model) == {"A100-80GB-PCIE"}


def test_empty_on_demand_price_with_spot_is_kept_for_spot_only(imported):
    df, _ = imported
    p5e = df[df.instance_type == "p5e.48xlarge"]
    assert len(p5e) and p5e.price_hour.isna().all() and p5e.spot_price_hour.notna().all()


def test_unknown_gpus_are_skipped_with_a_reason(imported):
    _, problems = imported
    k80 = [p for p in problems if p.value == "K80"]
    assert k80 and all(p.column == "gpu_model" and "azure_vms_gpu.csv" in p.sheet for p in k80)


def test_gpu_info_parser_tolerates_every_variant():
    assert skypilot.gpu_info("A100-80GB") == {"Name": "A100-80GB"}
    assert skypilot.gpu_info("") == {}
    assert skypilot.gpu_info("{'Gpus': [{'Name': 'A40', 'Count': '1.0', 'MemoryInfo': {'SizeInMiB': 49152}}]}")[
        "SizeInMiB"] == 49152
    assert skypilot.gpu_info("{'Gpus': [") == {"Name": "{'Gpus': ["}
    assert skypilot.gpu_info("[1, 2]") == {}
    assert skypilot.gpu_info("{'Gpus': 'x'}")["Name"] is None
    assert skypilot.gpu_info("__import__('os')")["Name"] == "__import__('os')"  # never evaluated


def test_columns_are_read_by_name_whatever_their_order(tmp_path):
    a = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo\n"
         "1x_L40_SECURE,L40,1.0,8.0,62.0,US,0.79,0.99,US-KS-2,\n")
    b = ("Price,Region,InstanceType,AcceleratorName,AcceleratorCount,SpotPrice\n0.99,US,1x_L40_SECURE,L40,1,0.79\n")
    (tmp_path / "runpod_vms.csv").write_text(a)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "vms.csv").write_text(b)
    df1, _ = skypilot.import_path(tmp_path / "runpod_vms.csv")
    df2, _ = skypilot.import_path(tmp_path / "x" / "vms.csv")
    for df in (df1, df2):
        assert (df.price_hour[0], df.spot_price_hour[0], df.gpu_model[0]) == (0.99, 0.79, "L40")


def test_bundled_snapshot_covers_300_offers_8_providers_and_every_rented_gpu(imported):
    from pricing.loader import load

    snap, problems = load(include_cache=False)
    assert problems == []
    assert len(snap) >= 300 and snap.provider.nunique() >= 8
    df, _ = imported
    assert set(df.gpu_model) <= set(snap.gpu_model)
    snap = snap[snap.source.str.startswith("skypilot-catalog@")]  # the snapshot (clusters.csv is beside it)
    assert len(snap) >= 300 and set(snap.fetched_at) == {"2026-11-30T00:00:00Z"}
    assert snap.source.str.match(r"skypilot-catalog@[0-9a-f]{12}:catalogs/v\d/\w+/vms.csv").all()


@pytest.mark.slow
def test_build_snapshot_script_reproduces_the_bundled_file(tmp_path):
    out = tmp_path / "snap.csv"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_snapshot.py"), str(CATALOG),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "skipped:" in res.stderr  # rejected rows are listed, not silent
    assert out.read_bytes() == (ROOT / "pricing" / "data" / "snapshot.csv").read_bytes()


def _provenance_with(tmp_path, dates: dict[str, str]):
    """A copy of two extracts with PROVENANCE.md whose "Commit dates" table says `dates`."""
    import shutil

    folder = tmp_path / "cat"
    folder.mkdir()
    for name in ("nebius_vms_gpu.csv", "hyperbolic_vms_gpu.csv"):
        shutil.copy(CATALOG / name, folder / name)
    text = (CATALOG / "PROVENANCE.md").read_text()
    head = text.split("## Commit dates")[0]
    table = "".join(f"| {n} | {d} |\n" for n, d in dates.items())
    (folder / "PROVENANCE.md").write_text(f"{head}## Commit dates\n\n| file | commit date |\n|---|---|\n{table}")
    return folder


def test_build_script_dates_rows_only_by_the_commit_dates_it_is_given(tmp_path):
    import pandas as pd

    folder = _provenance_with(tmp_path, {"nebius_vms_gpu.csv": "2026-11-27T06:12:44+00:00",
                                         "hyperbolic_vms_gpu.csv": "unknown"})
    out = tmp_path / "snap.csv"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_snapshot.py"), str(folder),
                          "--out", str(out), "--date", "2026-11-30"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    df = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert set(df.fetched_at) == {"2026-11-30T00:00:00Z"}  # when copied, for every row
    assert set(df[df.provider == "nebius"].observed_at) == {"2026-11-27T06:12:44Z"}
    assert set(df[df.provider == "hyperbolic"].observed_at) == {""}  # unknown stays unknown
    assert not df.notes.str.contains("stale").any()  # staleness is the loader's rule, not a label


def test_build_script_refuses_a_commit_date_that_is_not_a_date(tmp_path):
    folder = _provenance_with(tmp_path, {"nebius_vms_gpu.csv": "circa autumn 2026"})
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_snapshot.py"), str(folder),
                          "--out", str(tmp_path / "snap.csv")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "circa autumn 2026" in res.stderr and not (tmp_path / "snap.csv").exists()
