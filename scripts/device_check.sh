#!/usr/bin/env bash
# The one prepared check for a lent GPU (an H200 here): for Llama-3.1-8B LoRA, QLoRA and full fine-tuning, and a
# Llama-3.2-1B LoRA DPO run, plan the one-GPU candidate, write its launch bundle, run `launch.sh --benchmark` on
# random weights (--init_from_config: nothing downloaded), then GRPO (1B) and benchmarks/gpu_measure.py.
# Everything lands under $OUT:
#   $OUT/<case>.measured.json     the bundle's measured.json (gpu-advisor calibrate reads it back here)
#   $OUT/<case>.plan.json         the plan the bundle came from (case: lora, qlora, full, dpo)
#   $OUT/gpu_measure.csv          the harness's rows (benchmarks/throughput_rows.py reads them as a source)
#   $OUT/grpo_device.json         GRPO with vLLM colocated (benchmarks/grpo_device_check.py): measured vs estimated
#   $OUT/device_check.log         every command's output, and a summary line per case
# Each case has its own time limit and the whole script stops well inside 10 minutes (CHECK_SECONDS).
#
# Before the device run, here (the device has no registry; pydantic and bitsandbytes are not in its image):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 -d .whl \
#     pydantic pydantic-core annotated-types typing-inspection typing-extensions bitsandbytes trl datasets dill \
#     multiprocess
# (pydantic and pydantic-core must be a matching pair; TRL and datasets are not in the image either; bitsandbytes'
# wheel may be slimmed to its cpu/cuda13x libraries to stay inside the 64 MiB the tree may carry), then
# run(command="bash scripts/device_check.sh", carry=[".whl"], timeout_s=570). A rerun names only the cases still
# to run: CASES="lora dpo" bash scripts/device_check.sh. Afterwards, here:
#   gpu-advisor calibrate /work/.device/.../lora.measured.json
# Dry run on a CPU (tiny random Llama instead of 8B, no CUDA: QLoRA is refused by train.py and logged):
#   DEVICE_CHECK_DRY=1 OUT=/tmp/dc bash scripts/device_check.sh
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/device_check_out}"
WORK="${DEVICE_CHECK_WORK:-/tmp/device_check}"
PY="${PYTHON:-python3}"
CHECK_SECONDS="${CHECK_SECONDS:-540}"   # the whole script
CASE_SECONDS="${CASE_SECONDS:-130}"     # one bundle's benchmark
STEPS="${STEPS:-5}"
DRY="${DEVICE_CHECK_DRY:-}"
CASES=" ${CASES:-lora qlora full dpo grpo measure} "   # a rerun names only the cases still to run
START=$SECONDS
mkdir -p "$OUT" "$WORK"
LOG="$OUT/device_check.log"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((CHECK_SECONDS - (SECONDS - START))); }

if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.whl/*.whl >>"$LOG" 2>&1 && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
advisor() { "$PY" -m advisor "$@"; }   # the gpu-advisor CLI from this checkout
command -v accelerate >/dev/null || export PATH="$(dirname "$(command -v "$PY")"):$PATH"  # launch.sh runs it
"$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as md, torch
names = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "pydantic", "flash-attn", "liger-kernel")
def v(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "-"
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "|",
      ", ".join(f"{n} {v(n)}" for n in names))
EOF

if [ -n "$DRY" ]; then  # mechanics on a CPU: the tests' tiny Llama, short sequences
  MODEL="$WORK/tiny/config.json"; GPU=A100; SEQ=64; BATCH=8
  mkdir -p "$WORK/tiny"
  "$PY" -c "import json,sys; sys.path.insert(0,'$ROOT/tests/helpers'); from launch_fixtures import TINY_LLAMA; \
json.dump(TINY_LLAMA, open('$MODEL','w'))"
  CONFIG="$MODEL"; SMALL="$MODEL"; SMALL_CONFIG="$MODEL"; DPO_SEQ=64
else
  MODEL="meta-llama/Llama-3.1-8B"; GPU=H200; SEQ=2048; BATCH=8
  SMALL="meta-llama/Llama-3.2-1B"; DPO_SEQ=1024
  CONFIG="$WORK/llama-3.1-8b/config.json"; SMALL_CONFIG="$WORK/llama-3.2-1b/config.json"
  for pair in "$MODEL=$CONFIG" "$SMALL=$SMALL_CONFIG"; do  # each catalog model's config.json, for random init
    name=${pair%%=*} path=${pair#*=}; mkdir -p "$(dirname "$path")"
    "$PY" -c "import json; from advisor.model.catalog import load_model, to_hf_config; \
json.dump(to_hf_config(load_model('$name')), open('$path','w'), indent=1)" || { say "FAIL: $name config"; exit 1; }
  done
fi

# On the device: no flash-attn, liger-kernel or DeepSpeed in the image, so the stacks stay on SDPA, one GPU, no
# sharding; everything else (optimizer, checkpointing, micro-batch) is the plan's own choice.
ONE_GPU=(--gpu "$GPU" --max-gpus 1 --attention sdpa --no-liger --sharding none --allow-stale --top 1)
COMMON=(--model "$MODEL" --tokens 100M --seq-len "$SEQ" --global-batch "$BATCH" "${ONE_GPU[@]}")
# bench CASE BUNDLE CONFIG: time-limited `launch.sh --benchmark` of a written bundle, its measured.json to $OUT
bench() {
  local case=$1 bundle=$2 config=$3 limit t0 rc
  limit=$(( $(left) - 30 < CASE_SECONDS ? $(left) - 30 : CASE_SECONDS ))
  t0=$SECONDS
  (cd "$bundle" && timeout --kill-after=10 "$limit" bash launch.sh --init_from_config "$config" --benchmark \
    --steps "$STEPS" --warmup_steps 2) >>"$LOG" 2>&1  # in the bundle: its data path is relative
  rc=$?
  if [ -f "$bundle/measured.json" ]; then
    cp "$bundle/measured.json" "$OUT/$case.measured.json"
    say "OK   $case: $(( SECONDS - t0 )) s; $("$PY" -c "import json; d=json.load(open('$bundle/measured.json')); \
print(f\"{d['tokens_per_sec']:,.0f} tokens/s, step {d['step_seconds']['median']:.3f} s, peak allocated \
{(d.get('peak_allocated_bytes') or 0)/1e9:.1f} GB, reserved {(d.get('peak_reserved_bytes') or 0)/1e9:.1f} GB, device {(d.get('device_total_bytes') or 0)/1e9:.1f} GB\")")"
  else
    say "FAIL $case: benchmark exit $rc after $(( SECONDS - t0 )) s (timeout: 124; see log)"
  fi
}
# planned CASE ARGS...: plan the one candidate and write its bundle to $WORK/CASE (0 when both worked)
planned() {
  local case=$1; shift
  rm -rf "$WORK/$case"
  if ! advisor plan "$@" --format json >"$OUT/$case.plan.json" 2>>"$LOG"; then
    say "FAIL $case: plan (see log)"; return 1
  fi
  advisor launch --from "$OUT/$case.plan.json" --out "$WORK/$case" >>"$LOG" 2>&1 || { say "FAIL $case: launch"; return 1; }
}
for method in lora qlora full; do
  [[ $CASES == *" $method "* ]] || continue
  if [ "$(left)" -lt 60 ]; then say "SKIP $method: less than 60 s left"; continue; fi
  planned "$method" "${COMMON[@]}" --methods "$method" && bench "$method" "$WORK/$method" "$CONFIG"
done

# DPO (1B LoRA, reference = adapter off): TRL's preference rows, byte-tokenised by the bundle (1 token per ASCII
# character), each pair prompt + chosen and prompt + rejected at --seq-len
if [[ $CASES != *" dpo "* ]]; then :
elif [ "$(left)" -ge 90 ]; then
  if planned dpo --model "$SMALL" --objective dpo --pairs 20000 --seq-len "$DPO_SEQ" --global-batch 8 "${ONE_GPU[@]}" \
      --methods lora; then
    mkdir -p "$WORK/dpo/data"
    "$PY" -c "import json, random; r = random.Random(0); n = $DPO_SEQ // 2; \
w = lambda k: ''.join(r.choice('abcdefghij klmnop') for _ in range(k)); \
open('$WORK/dpo/data/train.jsonl', 'w').write(''.join(json.dumps({'prompt': w(n), 'chosen': w(n - 2), \
'rejected': w(n - 2)}) + '\n' for _ in range(256)))"
    bench dpo "$WORK/dpo" "$SMALL_CONFIG"
  fi
else
  say "SKIP dpo: less than 90 s left"
fi

# GRPO (issue 34, 1B): LoRA with vLLM colocated at gpu_memory_utilization 0.3 (transformers generation where vLLM is not
# in the image, or in the dry run), measured against the objective estimate: $OUT/grpo_device.json
GRPO_SECONDS="${GRPO_SECONDS:-150}"
if [[ $CASES != *" grpo "* ]]; then :
elif [ "$(left)" -ge 90 ]; then
  limit=$(( $(left) - 60 < GRPO_SECONDS ? $(left) - 60 : GRPO_SECONDS ))
  if [ -n "$DRY" ]; then gargs=(--dry --steps 1); else gargs=(--steps 3); fi
  timeout --kill-after=10 "$limit" "$PY" "$ROOT/benchmarks/grpo_device_check.py" --config "$SMALL_CONFIG" --out "$OUT" \
    "${gargs[@]}" >>"$LOG" 2>&1
  rc=$?
  if [ -f "$OUT/grpo_device.json" ]; then say "OK   grpo: $(tail -n 1 "$LOG")"; else say "FAIL grpo: exit $rc (see log)"; fi
else
  say "SKIP grpo: less than 90 s left"
fi

budget=$(( $(left) - 20 ))
if [[ $CASES != *" measure "* ]]; then :
elif [ "$budget" -ge 60 ]; then
  if [ -n "$DRY" ]; then args=(--device cpu --tiny --steps 1); else args=(--budget-seconds "$budget"); fi
  timeout --kill-after=10 "$budget" "$PY" "$ROOT/benchmarks/gpu_measure.py" "${args[@]}" --out "$WORK/gpu_measure" \
    >>"$LOG" 2>&1
  say "gpu_measure: exit $? ($(( SECONDS - START )) s in all)"
  cp "$WORK"/gpu_measure/*.csv "$OUT/gpu_measure.csv" 2>/dev/null || say "gpu_measure: no CSV"
else
  say "SKIP gpu_measure: ${budget} s left"
fi
say "done in $(( SECONDS - START )) s"
