"""Planner-written sky.yaml files load in SkyPilot's own `sky.Task.from_yaml`, offline, and SkyPilot's own
catalog code resolves their resources (accelerators of the instance type, price in the region, spot).

SkyPilot reads `~/.sky/catalogs/<CATALOG_SCHEMA_VERSION>/<cloud>/vms.csv` and downloads it only when the file is
missing, or when a pull frequency is set and the file is an unmodified download (a `.meta/<cloud>/vms.csv.md5`
written by that download matches it) older than the frequency: `read_catalog._need_update` in
sky/clouds/service_catalog/common.py (skypilot 0.9.2, lines 182-193; the same in sky/catalog/common.py of 0.14.1,
lines 218-229). A catalog we write ourselves has no `.md5`, counts as modified, and is never fetched. We write one
per cloud, under a private HOME, from the bundled offers (the snapshot, itself SkyPilot catalog rows, and the offers
the dated observation sheet adds).
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
import yaml
from helpers.launch_fixtures import spec
from helpers.skypilot import load_with_skypilot, offers_sheet

from advisor.launch.bundle import LaunchWarning, build_bundle
from advisor.launch.caveats import SKY_NOTE, SKYPILOT_CHECKED, SKYPILOT_CLOUDS
from advisor.planner import plan

# Not imported here: importing sky creates ~/.sky (catalog folders, a jobs database) in the real HOME.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sky") is None, reason="skypilot not installed (test extra)")


PLANS = [  # (model, plan fields): together they give 1-GPU, 8-GPU, 2-node and spot candidates
    ("meta-llama/Llama-3.2-1B", dict(methods=("lora",), top=40, spot=True, providers=("aws", "gcp", "azure", "nebius"))),
    ("meta-llama/Llama-3.1-8B", dict(methods=("full",), top=40, max_nodes=2, spot=True)),
    ("meta-llama/Llama-3.1-70B", dict(methods=("full",), top=20, max_nodes=2, spot=True)),
]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Every distinct machine the sample plans name, its sky.yaml, and what SkyPilot made of it."""
    folder = tmp_path_factory.mktemp("sky")
    written: dict[Path, tuple] = {}
    for model, fields in PLANS:
        p = plan(model, tokens=20e6, **fields)
        for c in p.candidates + p.others:
            o = c.offer
            key = (o.provider, o.region, o.instance_type, o.gpu_model, o.gpu_count, c.nodes, c.cost.spot)
            if key in written.values():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LaunchWarning)
                text = build_bundle(c, spec())["sky.yaml"]
            path = folder / f"{len(written)}.yaml"
            path.write_text(text, encoding="utf-8")
            written[path] = key
    results, summary = load_with_skypilot(list(written), folder / "home", offers_sheet(folder / "offers.csv"))
    return written, results, summary


def test_sample_covers_one_gpu_eight_gpus_two_nodes_and_spot(loaded):
    written, _, _ = loaded
    keys = list(written.values())
    assert any(k[4] == 1 for k in keys) and any(k[4] == 8 for k in keys)
    assert any(k[5] == 2 for k in keys) and any(k[6] for k in keys)


def test_skypilot_loads_every_sky_yaml_and_resolves_its_resources(loaded):
    written, results, summary = loaded
    assert summary["network_attempts"] == []
    checked, unlisted, refused = 0, set(), set()
    for path, (provider, region, instance_type, gpu_model, gpus, nodes, spot) in written.items():
        text = path.read_text(encoding="utf-8")
        task = yaml.safe_load(text)
        # The bundle says so (a caveat, repeated in sky.yaml) exactly when this SkyPilot has no such cloud.
        assert (SKY_NOTE in text) == (task["resources"]["cloud"] not in summary["known"]), provider
        if task["resources"]["cloud"] not in summary["known"]:
            refused.add(task["resources"]["cloud"])
            continue
        got = results[str(path)]
        assert "error" not in got, (provider, instance_type, got.get("error"))
        assert (got["cloud"], got["region"], got["instance_type"]) == (task["resources"]["cloud"], region,
                                                                        instance_type)
        assert got["accelerators"] == {gpu_model: gpus}, (provider, instance_type)
        if got["instance_accelerators"] is None and got["cloud"] == "gcp":
            # GCP attaches GPUs; SkyPilot maps GPU instance types to them in a hard-coded table
            # (_ACC_INSTANCE_TYPE_DICTS, sky/clouds/service_catalog/gcp_catalog.py:73 in 0.9.2), which has no H200
            # a3-ultragpu-8g and no a3-edgegpu-8g (A3 Edge, billed as a3-highgpu-8g) yet: SkyPilot's gap, not the file's.
            unlisted.add(instance_type)
        else:
            assert got["instance_accelerators"] == {gpu_model: gpus}, (provider, instance_type)
        assert got["num_nodes"] == nodes and got["use_spot"] == spot
        assert got["price"] > 0  # SkyPilot prices exactly this region and capacity (spot or on-demand)
        checked += 1
    assert checked >= 20 and len(summary["seeded"]) >= 8 and unlisted <= {"a3-ultragpu-8g", "a3-edgegpu-8g"}
    # Only providers SkyPilot 0.9.2 has no cloud for (hyperbolic arrived in 0.10; hyperstack and coreweave have none
    # in 0.14.1 either) are left out: a provider whose name we fail to map to SkyPilot's (lambdalabs -> lambda) would show.
    # The sellers only the dated observation sheet prices that SkyPilot 0.9.2 has no cloud for either;
    # DigitalOcean: SkyPilot 0.9.2 has a `do` cloud, but its catalog is not in the offline seed (its loader would
    # fetch it), so providers.csv leaves DigitalOcean unmapped and the bundle says `sky launch` refuses it.
    observed_only = {"crusoe", "civo", "scaleway", "together", "massedcompute", "ovhcloud", "tensordock", "sesterce",
                     "akamai", "salad", "vultr", "jarvislabs", "spheron", "shadeform", "verda", "akash",
                     "digitalocean"}
    assert refused <= {"hyperstack", "coreweave", "hyperbolic"} | observed_only, refused


def test_the_clouds_the_bundle_trusts_are_the_checked_skypilots(loaded):
    _, _, summary = loaded
    # Every cloud the bundle writes a sky.yaml for is one the installed SkyPilot's own registry loads (a newer
    # release that adds clouds stays compatible); the release the note names is the one the test extra installs.
    assert SKYPILOT_CLOUDS <= set(summary["known"]), sorted(SKYPILOT_CLOUDS - set(summary["known"]))
    assert SKYPILOT_CHECKED in (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()


def test_the_check_catches_a_wrong_accelerator_region_or_spot(tmp_path):
    """The resolution the tests above rely on fails when the sky.yaml does not match the catalog."""
    good = {"cloud": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge", "accelerators": "A100:8"}
    cases = [dict(good, accelerators="H100:8"), dict(good, region="af-south-1"), dict(good, instance_type="p9.xl"),
             dict(good, cloud="lambda", region="us-east-1", instance_type="gpu_1x_a10", accelerators="A10:1",
                  use_spot=True)]
    paths = []
    for i, resources in enumerate(cases):
        paths.append(tmp_path / f"{i}.yaml")
        paths[-1].write_text(yaml.safe_dump({"resources": resources, "run": "true"}), encoding="utf-8")
    results, summary = load_with_skypilot(paths, tmp_path / "home")
    wrong_gpu, wrong_region, wrong_type, spot_without_price = (results[str(p)] for p in paths)
    assert wrong_gpu["accelerators"] != wrong_gpu["instance_accelerators"]
    assert "error" in wrong_region and "error" in wrong_type and "error" in spot_without_price
    assert summary["network_attempts"] == []
