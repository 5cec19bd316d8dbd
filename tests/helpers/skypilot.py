"""Shared by tests in several folders (moved out of tests/advisor/launch/test_sky_yaml.py, issue 44)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parents[2] / "pricing" / "data" / "snapshot.csv"


# Runs in a child Python with HOME pointing at an empty folder: SkyPilot fixes its catalog folder at import time.
LOADER = textwrap.dedent(r"""
    import csv, json, os, socket, sys

    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(repr(args)[:200])
        raise OSError("network disabled in this test")
    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.create_connection = socket.getaddrinfo = refuse

    try:  # skypilot >= 0.10 moved the catalog package
        from sky.catalog import common, constants
    except ImportError:
        from sky.clouds.service_catalog import common, constants
    from sky.utils import registry
    import sky

    snapshot, yamls = sys.argv[1], json.loads(sys.stdin.read())
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
    clouds = {}
    with open(snapshot, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["provider"] not in registry.CLOUD_REGISTRY:
                continue  # a provider SkyPilot has no cloud for: nothing to seed
            clouds.setdefault(r["provider"], []).append(
                [r["instance_type"], r["gpu_model"], r["gpu_count"], r["vcpus"], r["ram_gb"], "", r["price_hour"],
                 r["spot_price_hour"], r["region"], ""])
    for cloud, rows in clouds.items():
        with open(common.get_catalog_path(f"{cloud}/vms.csv"), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header.split(","))
            w.writerows(rows)

    for path in yamls:
        out = {"path": path}
        try:
            task = sky.Task.from_yaml(path)
            (r,) = task.resources
            out.update(num_nodes=task.num_nodes, cloud=str(r.cloud).lower(), region=r.region,
                       instance_type=r.instance_type, accelerators=r.accelerators, use_spot=r.use_spot,
                       instance_accelerators=r.cloud.get_accelerators_from_instance_type(r.instance_type),
                       price=r.cloud.instance_type_to_hourly_cost(r.instance_type, r.use_spot, r.region, r.zone))
        except Exception as e:  # reported per file, asserted by the test
            out["error"] = f"{type(e).__name__}: {e}"[:500]
        print(json.dumps(out))
    print(json.dumps({"schema": constants.CATALOG_SCHEMA_VERSION, "seeded": sorted(clouds),
                      "version": sky.__version__, "known": sorted(registry.CLOUD_REGISTRY),
                      "network_attempts": attempts}))
""")


CLOUD_VARIABLES = ("SKYPILOT_", "AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "AZURE_", "OCI_", "KUBECONFIG")


def load_with_skypilot(paths: list[Path], home: Path, sheet: Path = SNAPSHOT) -> tuple[dict[str, dict], dict]:
    # A cloud SDK that happens to be installed (boto3 on CI's base Python) looks for credentials while SkyPilot
    # validates a task: botocore asks the EC2 instance-metadata service at 169.254.169.254 unless
    # AWS_EC2_METADATA_DISABLED is set (botocore/utils.py, IMDSFetcher, 1.43), google-auth pings the GCE
    # metadata server unless NO_GCE_CHECK is set (google/auth/compute_engine/_metadata.py). The private HOME holds
    # no credentials, and the caller's own cloud variables are not passed on.
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLOUD_VARIABLES)}
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_DEBUG="0",
               AWS_EC2_METADATA_DISABLED="true", NO_GCE_CHECK="True")
    run = subprocess.run([sys.executable, "-c", LOADER, str(sheet)], input=json.dumps([str(p) for p in paths]),
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {line["path"]: line for line in lines[:-1]}, lines[-1]


def offers_sheet(path: Path) -> Path:
    """The bundled offers the plans were drawn from (the snapshot, the cluster sheet and the offers only the
    dated observation sheet lists, e.g. an AWS region the snapshot's extract lacks), as one sheet."""
    from pricing.loader import load
    from pricing.schema import COLUMNS

    load(include_cache=False)[0][list(COLUMNS)].to_csv(path, index=False)
    return path
