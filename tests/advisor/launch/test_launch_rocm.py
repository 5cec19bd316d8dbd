"""An AMD (ROCm) row's launch bundle says, where a user reads before renting, that its requirements pin CUDA builds
(torch, and flash-attn / bitsandbytes when the stack uses them) and what to install instead; an NVIDIA row's bundle
says nothing of ROCm. Real plans on the bundled sheet, real `gpu-advisor launch`."""

from __future__ import annotations

import pytest
from helpers.cli_run import gpu_advisor


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("gpu, methods, amd", [("MI300X", "lora", True), ("MI300X", "qlora", True),
                                               ("H100", "lora", False)])
def test_the_bundle_readme_names_the_cuda_pins_on_an_amd_row(tmp_path, capsys, gpu, methods, amd):
    out = tmp_path / "bundle"
    code, stdout, err = gpu_advisor(capsys, "launch", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--gpu", gpu,
                                    "--methods", methods, "--out", out)
    assert code == 0, err
    readme = (out / "README.md").read_text(encoding="utf-8")
    pins = (out / "requirements.txt").read_text(encoding="utf-8")
    said = "AMD GPU (ROCm)" in readme
    assert said is amd, readme[:2000]
    if amd:  # the caveat names exactly the pinned CUDA-built packages this stack installs
        line = next(x for x in readme.splitlines() if "AMD GPU (ROCm)" in x)
        assert "torch" in line and "torch" in pins
        assert ("bitsandbytes" in line) is (methods == "qlora") and ("bitsandbytes" in pins) is (methods == "qlora")
        assert ("AMD GPU (ROCm)" in stdout + err)  # launch prints the caveats it wrote
