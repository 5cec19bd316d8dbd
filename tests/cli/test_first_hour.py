"""A new user's first hour (issue 36): estimate and plan say the same stack, one memory vocabulary across
commands, messages that name what the user gave, tables that fold names at separators, a chart that says when
it log-scales an outlier and a report that leads with the decision."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from helpers.cli_run import gpu_advisor, one_line_error
from helpers.reference_plans import PLANS, advisor

from advisor.units import GB


def test_estimate_says_its_stack_and_how_plan_would_differ_mistral_7b(capsys, tmp_path):
    code, out, err = gpu_advisor(capsys, "estimate", "mistral-7b")
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("Assumed stack: full · bf16 · adamw")
    assert "plan would pick --precision amp-bf16" in first and "fp32 master weights" in first
    # plan's pick for the command keeps fp32 master weights, as the first line says
    done = advisor(tmp_path, "plan", "--model", "mistral-7b", "--methods", "full", "--gpu", "H100", "--tokens", "100M",
                   "--format", "json")
    top = json.loads(done.stdout)["candidates"][0]
    assert top["stack"]["precision"].startswith("amp-") or "fp32 master" in top["label"]
    # and the flag the line names gives plan's figure: more memory than pure bf16
    _, mixed, _ = gpu_advisor(capsys, "estimate", "mistral-7b", "--precision", "amp-bf16", "--format", "json")
    _, pure, _ = gpu_advisor(capsys, "estimate", "mistral-7b", "--format", "json")
    assert json.loads(mixed)["breakdown"]["total"] > 1.5 * json.loads(pure)["breakdown"]["total"]
    _, same, _ = gpu_advisor(capsys, "estimate", "mistral-7b", "--precision", "amp-bf16")
    assert "(what plan picks for full" in same.splitlines()[0]


@pytest.mark.parametrize("gpu,card,usable", [("A10G", "24 GB card", "23.7 GB usable"),
                                             ("H100", "80 GB card", "84.9 GB usable")])
def test_one_memory_vocabulary_in_estimate_plan_and_report(capsys, tmp_path, gpu, card, usable):
    from pricing.gpus import get_gpu

    words = get_gpu(gpu).memory_words(0.10)
    assert card in words and usable in words and "limit" in words
    _, out, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora", "--gpu", gpu)
    assert words in out
    _, out, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora")
    assert f"{gpu} {card.split(' card')[0]}" in out  # "fits with 10% headroom on: ... A10G 24 GB"
    done = advisor(tmp_path, "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--methods", "full",
                   "--gpu", gpu, "--format", "json", "-o", "p.json", "--report", "r.html")
    plan = json.loads((tmp_path / "p.json").read_text())
    table = advisor(tmp_path, "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--methods", "full",
                    "--gpu", gpu).stdout
    html = (tmp_path / "r.html").read_text()
    assert done.returncode in (0, 3)
    for c in plan["candidates"][:3]:
        peak, limit = c["fit"]["peak_bytes"] / GB, c["fit"]["limit_bytes"] / GB
        assert f"{peak:.1f}/{limit:.1f}" in table  # GB peak/limit
        assert f"{peak:.1f} GB / {limit:.1f} GB" in html  # the same pair, same unit, in the report
    assert "GiB" not in table and "GiB" not in html
    for r in plan["rejected"]:
        assert "GiB" not in r["reason"]


def test_estimate_without_a_model_says_what_to_give(capsys):
    line = one_line_error(*gpu_advisor(capsys, "estimate")[::2])
    assert "no model given" in line and "--params" in line and "not both" not in line
    line = one_line_error(*gpu_advisor(capsys, "estimate", "mistral-7b", "--params", "7B")[::2])
    assert "mistral-7b" in line and "7B" in line


def test_tokens_offline_names_the_model_and_says_download_once_or_give_tokenizer(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    code, _, err = gpu_advisor(capsys, "tokens", data, "--model", "meta-llama/Llama-3.1-8B")
    line = one_line_error(code, err)
    assert line.startswith("error: --model meta-llama/Llama-3.1-8B: its tokenizer")
    assert "download it once" in line and "--tokenizer" in line.split(";")[-1]


def test_launch_caveat_for_deepspeed_half_precision_says_what_the_estimate_counts():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "advisor" / "launch" / "caveats.py").read_text()
    assert "check the estimate assumed that" not in text


def test_near_tie_reason_is_never_as_good():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "advisor" / "planner" / "ranking.py").read_text()
    assert '"as good"' not in text


def test_names_fold_after_separators_never_mid_word():
    from cli.output import fold_at_separators, render_table

    assert fold_at_separators("2x-H100-149-14343", 14) == "2x-H100-149-\n14343"
    assert fold_at_separators("vast 2x-A100_SXM4-32-65536", 14) == "vast 2x-A100_\nSXM4-32-65536"
    out = render_table(["#", "instance", "stack"], [["1", "vast 2x-H100-149-14343", "lora r16 · bf16 · adamw"]],
                       width=30)
    assert "14343" in out and "149-14\n" not in out


@pytest.fixture(scope="module")
def lora_plan(tmp_path_factory) -> dict:
    """The 8b-lora plan's JSON, made once for every terminal width below (JSON does not depend on COLUMNS)."""
    js = advisor(tmp_path_factory.mktemp("lora"), "plan", *shlex.split(PLANS["8b-lora"]), "--format", "json")
    assert js.returncode == 0, js.stderr
    return json.loads(js.stdout)


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_table_never_breaks_an_instance_name_mid_word(tmp_path, columns, lora_plan):
    done = advisor(tmp_path, "plan", *shlex.split(PLANS["8b-lora"]), columns=columns)
    table = done.stdout.split("\n\n")[0]
    assert max(len(x) for x in table.splitlines()) <= columns
    for c in lora_plan["candidates"]:
        for word in re.split(r"[-_/. ]", c["offer"]["instance_type"]):
            assert word in table, (word, c["offer"]["instance_type"])


def test_cost_time_chart_log_scales_an_outlier_and_says_so():
    from helpers import plan_factory as pf

    from reports import charts

    assert charts.log_scaled([4.0, 5.0, 5.5, 6.0, 42.0]) and not charts.log_scaled([4.0, 5.0, 5.5, 6.0, 7.0])
    plan = pf.single_gpu_plan(stale=False)
    for i, c in enumerate(plan.candidates):  # nine rows at $5-$6 and one 8x B300-like row at $42
        c.cost.usd = 5.0 + 0.05 * i
    plan.candidates[-1].cost.usd = 42.0
    if plan.baseline is not None:
        plan.baseline.cost.usd = 6.0
    svg = charts.cost_time_chart(plan)
    assert "log scale: outlier at $" in svg


def test_report_leads_with_the_decision_then_a_short_table_and_collapses_the_price_list(tmp_path):
    done = advisor(tmp_path, "plan", *shlex.split(PLANS["8b-lora"]), "--report", "r.html")
    assert done.returncode == 0
    html = (tmp_path / "r.html").read_text()
    card, short, detail = html.index('id="decision"'), html.index('aria-label="Top candidates"'), \
        html.index('aria-label="Top candidates in detail"')
    assert card < short < detail
    header = re.search(r'aria-label="Top candidates".*?<thead>(.*?)</thead>', html, re.S).group(1)
    # rank, cost, hours, the total the rows rank on (cost + hours x --time-value), GPUs, instance, stack
    assert len(re.findall("<th", header)) <= 7 and "Total p80" in header
    assert re.search(r'<details id="prices-used"><summary>Prices used', html)


def test_readme_says_how_long_the_tests_take_what_they_install_and_how_to_get_cpu_torch():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "1.7 GB" in readme and "minutes of pytest" in readme
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    assert "python3 -m pip install -e '.[test]' && python3 -m pytest" in readme  # the two commands unchanged


# --------------------------------------------------------------------------- the first hour, second pass


def test_tokens_needs_the_data_extra_and_that_extra_holds_what_it_loads_with(capsys, tmp_path, monkeypatch):
    """Without transformers (a bare install plus tokenizers), a Hub tokenizer's refusal names the data extra
    (transformers without torch), not the ml extra's CUDA torch; and the data extra really brings it."""
    import sys
    import tomllib
    from pathlib import Path

    from advisor.workload import dataset_tokens

    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    code, _, err = gpu_advisor(capsys, "tokens", data, "--model", "meta-llama/Llama-3.1-8B")
    line = one_line_error(code, err)
    assert f"pip install '{dataset_tokens.DATA_EXTRA}'" in line and "[ml]" not in line
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    extra = {re.split(r"[<>=!~ \[]", r)[0] for r in pyproject["project"]["optional-dependencies"]["data"]}
    assert dataset_tokens.DATA_EXTRA == "gpu-cost-advisor[data]" and pyproject["project"]["name"] == "gpu-cost-advisor"
    assert {"transformers", "tokenizers", "datasets", "pyarrow"} <= extra and "torch" not in extra


class _Hub:
    """Counts what a tokenizer load asks: the local cache (always), name lookups, connections, the Hub."""

    def __init__(self, monkeypatch, resolve=None):
        import socket

        import transformers

        self.local = self.remote = self.lookups = 0

        def from_pretrained(where, token=None, local_files_only=False):
            if local_files_only:
                self.local += 1
            else:
                self.remote += 1
            raise OSError("not in the cache")

        def create_connection(address, timeout=None, *args):
            self.lookups += 1
            if resolve is not None:
                resolve()
            raise OSError("Temporary failure in name resolution")

        monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
        monkeypatch.setattr(socket, "create_connection", create_connection)


def _tokens_error(capsys, tmp_path) -> str:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    return one_line_error(*gpu_advisor(capsys, "tokens", data, "--model", "meta-llama/Llama-3.1-8B")[::2])


def test_tokens_offline_asks_the_local_cache_only_and_names_the_hub_cli(capsys, tmp_path, monkeypatch):
    """Under HF_HUB_OFFLINE nothing leaves the machine: no name lookup, no connection, no Hub request (the
    35 s of retries); the refusal names the hub's real CLI, `hf download`."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = _Hub(monkeypatch)
    line = _tokens_error(capsys, tmp_path)
    assert (hub.local, hub.lookups, hub.remote) == (1, 0, 0)
    assert "`hf download meta-llama/Llama-3.1-8B`" in line and "huggingface-cli" not in line


def test_tokens_without_a_network_stops_at_the_probe_even_when_name_lookup_hangs(capsys, tmp_path, monkeypatch):
    """No HF_HUB_OFFLINE and no network: one probe, bounded even when resolving the host never returns (a socket
    timeout does not bound it), and the Hub's retrying download is never started."""
    import threading

    from advisor.workload import dataset_tokens

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(dataset_tokens, "HUB_PROBE_S", 0.2)
    monkeypatch.setattr(dataset_tokens._hub_reachable, "__defaults__", (0.2,))
    release = threading.Event()
    hub = _Hub(monkeypatch, resolve=lambda: release.wait(30))  # a lookup that hangs until the test ends
    try:
        line = _tokens_error(capsys, tmp_path)
    finally:
        release.set()
    assert (hub.local, hub.lookups, hub.remote) == (1, 1, 0)
    assert "cannot be reached within 0.2 s" in line and "`hf download" in line
    hub_down = _Hub(monkeypatch)  # a lookup that fails at once: the same refusal, no Hub request
    _tokens_error(capsys, tmp_path)
    assert (hub_down.local, hub_down.lookups, hub_down.remote) == (1, 1, 0)


def test_the_real_local_cache_lookup_reaches_no_network_so_the_probe_is_the_only_lookup(capsys, tmp_path,
                                                                                        monkeypatch):
    """With the real transformers and huggingface_hub: looking in the local cache asks no name server (the
    library's per-request agent registry fetch is what took ~30 s with no network), and the probe is the
    one lookup before the refusal."""
    import socket
    import threading

    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agent_harnesses.json"))  # none cached
    monkeypatch.setattr(_detect_agent, "_registry", None)
    lookups = []

    def no_network(host, *args, **kwargs):
        lookups.append(threading.current_thread().name)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    line = one_line_error(*gpu_advisor(capsys, "tokens", data, "--tokenizer", "acme-absent/tokenizer-0")[::2])
    assert lookups == ["hub-probe"] and "cannot be reached" in line
    assert constants.HF_HUB_OFFLINE is False  # the offline switch was for the lookup only


def test_prices_limit_n_returns_n_rows_one_per_instance_type_when_a_gpu_is_named(capsys):
    """`prices list --gpu H100 --limit 3` lists the three cheapest H100 instance types (each at its cheapest
    region), not one row for the one GPU; --all still lists every row, and the footer says which."""
    def rows(*args):
        code, out, err = gpu_advisor(capsys, "prices", "list", "--format", "json", *args)
        assert code == 0, err
        return json.loads(out)

    every = rows("--gpu", "H100", "--all")
    instances = {(r["provider"], r["instance_type"]) for r in every}
    assert len(instances) >= 3
    three = rows("--gpu", "H100", "--limit", "3")
    assert len(three) == 3 and len({(r["provider"], r["instance_type"]) for r in three}) == 3
    assert [r["price_per_gpu_hour"] for r in three] == sorted(r["price_per_gpu_hour"] for r in three)
    listed = rows("--gpu", "H100")
    assert len(listed) == len(instances) and three == listed[:3]
    for r in listed:  # each is its instance type's cheapest fresh row (a stale one only where none is fresh)
        same = [x for x in every if (x["provider"], x["instance_type"]) == (r["provider"], r["instance_type"])]
        fresh = [x["price_per_gpu_hour"] for x in same if not x["stale"]] or [x["price_per_gpu_hour"] for x in same]
        assert r["price_per_gpu_hour"] == min(fresh)
    assert rows("--gpu", "H100", "--all", "--limit", "3") == every[:3]
    per_gpu = rows("--limit", "3")  # without --gpu: the overview, one row per GPU model
    assert len(per_gpu) == 3 and len({r["gpu_model"] for r in per_gpu}) == 3
    _, table, _ = gpu_advisor(capsys, "prices", "list", "--gpu", "H100", "--limit", "3")
    footer = next(ln for ln in table.splitlines() if "offers" in ln)
    assert footer.startswith(f"3 of {len(instances)} offers (--limit 3): the cheapest region per instance type of "
                             f"{len(every):,} matching rows (--all lists every row)")


@pytest.mark.parametrize("args, loss, flag", [
    ((), "TRL's fused LM head", "for a plain transformers Trainer, --loss standard"),
    (("--loss", "standard"), "ForCausalLMLoss", "(--loss standard)"),
    (("--loss", "cce"), "Cut Cross-Entropy", "(--loss cce)"),
])
def test_estimates_first_line_names_the_loss_path_and_the_flag_for_a_plain_trainer(capsys, args, loss, flag):
    code, out, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora", *args)
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("Assumed stack:") and loss in first and flag in first
    # the flag the line names changes the estimate: a plain Trainer keeps the logits, so it needs more memory
    if not args:
        _, trl, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora", "--format", "json")
        _, std, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora", "--loss", "standard",
                                "--format", "json")
        assert json.loads(std)["breakdown"]["total"] > json.loads(trl)["breakdown"]["total"]


def test_an_lm_head_lora_under_the_default_loss_points_at_the_plain_trainer_flag(capsys):
    line = one_line_error(*gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora",
                                       "--lora-targets", "q_proj,lm_head")[::2])
    assert "--loss standard" in line and "lm_head" in line
    code, _, _ = gpu_advisor(capsys, "estimate", "meta-llama/Llama-3.2-1B", "--method", "lora", "--lora-targets",
                             "q_proj,lm_head", "--loss", "standard")
    assert code == 0  # and the flag it names is the way through
