#!/usr/bin/env python3
"""How long `gpu-advisor tokens` takes on 1 million rows of a local JSONL, sampled and exact.

Writes a JSONL of chat-length texts (10-400 words) and a byte-level BPE tokenizer trained on it
with the `tokenizers` library (no download), then times the whole command as a process, best of
--repeat runs, in sample mode (20,000 rows, the default) and exact mode (every row). Prints the
times; tests never assert them.

    python benchmarks/bench_tokens.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the model reads every token of the dataset before training starts and some rows are much longer "
         "than others so padding and truncation change what the run costs on a rented gpu").split()


def write_data(folder: Path, rows: int) -> tuple[Path, Path]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    data = folder / "train.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for _ in range(rows):
            f.write(json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(10, 400)))}) + "\n")
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([" ".join(WORDS)] * 100, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return data, path


def best(args: list[str], repeat: int) -> tuple[float, str]:
    """(best wall seconds of `repeat` runs, the last run's stdout)."""
    times, out = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        data, tok = write_data(Path(tmp), opts.rows)
        print(f"wrote {opts.rows:,} rows ({data.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s")
        base = [sys.executable, "-m", "advisor", "tokens", str(data), "--tokenizer", str(tok), "--format", "json"]
        bare, _ = best([sys.executable, "-c", "pass"], opts.repeat)
        for name, extra in (("sample (20,000 rows)", []), ("exact (every row)", ["--exact"])):
            seconds, out = best(base + extra, opts.repeat)
            s = json.loads(out)["stats"]
            bound = "" if s["exact"] else f" ± {s['total_tokens_error']:,.0f}"
            print(f"tokens, {name}: {seconds:.2f} s as a process (best of {opts.repeat}; bare python {bare:.2f} s): "
                  f"{s['total_tokens']:,.0f}{bound} tokens in {s['rows']:,} rows")


if __name__ == "__main__":
    main()
