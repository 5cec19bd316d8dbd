"""Hostile endpoints: URL passwords never travel, redirects stay on the host, and
network or cache failures are one line. Local pytest-httpserver only, never the internet."""

from __future__ import annotations

import json

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

PASSWORD = "PASSW0RD"
LAMBDA = {"data": {
    "gpu_1x_h100_pcie": {"instance_type": {"name": "gpu_1x_h100_pcie", "description": "1x H100 (80 GB PCIe)",
                                           "gpu_description": "H100 (80 GB PCIe)", "price_cents_per_hour": 129,
                                           "specs": {"vcpus": 26, "memory_gib": 200, "storage_gib": 1000, "gpus": 1}},
                         "regions_with_capacity_available": [{"name": "us-east-1"}]}}}


@pytest.fixture(autouse=True)
def fast_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "1")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_TIMEOUT", "2")
    monkeypatch.setenv("LAMBDA_API_KEY", "secret-lambda-key")


def with_password(httpserver, path: str) -> str:
    return httpserver.url_for(path).replace("http://", f"http://user:{PASSWORD}@", 1)


def test_a_url_password_reaches_no_cache_file_plan_report_bundle_or_output(httpserver, monkeypatch, capsys,
                                                                            tmp_path):
    httpserver.expect_request("/api/v1/instance-types").respond_with_json(LAMBDA)
    monkeypatch.setenv("GPU_ADVISOR_LAMBDA_URL", with_password(httpserver, "/api/v1"))
    outputs = []
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda")
    assert code == 0, err
    outputs += [out, err]
    code, out, err = gpu_advisor(capsys, "prices", "sources", "--format", "json")
    outputs += [out, err]
    assert f"***@{httpserver.host}" in out  # the configured URL is shown, masked
    code, out, err = gpu_advisor(capsys, "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "10M",
                                 "--methods", "lora", "--providers", "lambda", "--allow-stale", "--format", "json")
    assert code == 0, err
    outputs += [out, err]
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    assert json.loads(out)["candidates"][0]["offer"]["provider"] == "lambda"  # the fetched row is the one used
    code, out, err = gpu_advisor(capsys, "report", str(plan), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    outputs += [out, err]
    code, out, err = gpu_advisor(capsys, "launch", "--from", str(plan), "--out", str(tmp_path / "bundle"))
    assert code == 0, err
    outputs += [out, err]
    artefacts = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".csv" for p in artefacts) and any(p.name == "sky.yaml" for p in artefacts)
    for p in artefacts:
        assert PASSWORD not in p.read_text(errors="replace"), p
    assert all(PASSWORD not in text for text in outputs)
    assert len(httpserver.log) == 1  # one request, made with the password (it is the user's to send)


def test_a_failing_endpoint_with_a_password_is_one_masked_line(httpserver, monkeypatch, capsys):
    httpserver.expect_request("/api/v1/instance-types").respond_with_data("no", status=403)
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", with_password(httpserver, "/api/v1"))
    line = one_line_error(code, err.replace("lambda: fetching", "").split("\n", 1)[-1], 1)
    assert PASSWORD not in err + out and f"http://***@{httpserver.host}" in line and "HTTP 403" in line


def test_connection_refused_is_one_line_without_an_exception_name(monkeypatch, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", f"http://u:{PASSWORD}@127.0.0.1:{port}/api")
    lines = err.strip().splitlines()
    assert code == 1 and lines[-1].startswith("error: 1 source(s) failed: lambda:")
    assert [line for line in lines if "failed" in line] == [lines[-1]]  # said once
    assert "ConnectionError" not in err and "Traceback" not in err and PASSWORD not in err


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/api/v1/instance-types",
                                    "http://127.0.0.2:{port}/api/v1/instance-types"])
def test_a_redirect_to_another_host_is_refused(httpserver, capsys, target):
    httpserver.expect_request("/api/v1/instance-types").respond_with_data(
        "", status=302, headers={"Location": target.format(port=httpserver.port)})
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", httpserver.url_for("/api/v1"))
    assert code == 1 and "redirected to another host" in err.strip().splitlines()[-1]
    assert len(httpserver.log) == 1  # the other host was never asked


def test_a_redirect_on_the_same_host_is_followed(httpserver, capsys):
    httpserver.expect_request("/old/instance-types").respond_with_data(
        "", status=301, headers={"Location": "/api/v1/instance-types"})
    httpserver.expect_request("/api/v1/instance-types").respond_with_json(LAMBDA)
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", httpserver.url_for("/old"))
    assert code == 0, err


def test_a_cache_folder_that_is_a_file_is_one_line_and_names_it(httpserver, monkeypatch, capsys, tmp_path):
    httpserver.expect_request("/api/v1/instance-types").respond_with_json(LAMBDA)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(blocker))
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", httpserver.url_for("/api/v1"))
    last = err.strip().splitlines()[-1]
    assert code == 1 and "cannot write the cache at" in last and "NotADirectoryError" not in err
    assert blocker.read_text() == "x"


def test_a_full_disk_keeps_the_cache_and_is_one_line(httpserver, monkeypatch, capsys):
    import errno

    from pricing import files

    httpserver.expect_request("/api/v1/instance-types").respond_with_json(LAMBDA)

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "atomic_write", full)
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "lambda",
                                 "--endpoint", httpserver.url_for("/api/v1"))
    last = err.strip().splitlines()[-1]
    assert code == 1 and "No space left on device" in last and "OSError" not in err
