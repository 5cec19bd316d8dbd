#!/usr/bin/env python3
"""Convert chat JSONL ({"messages": [{"role": ..., "content": ...}, ...]} per line, the OpenAI / TRL
conversational format) into the {"text": ...} JSONL that train.py reads, with the model's own chat template
(tokenizer.apply_chat_template(..., tokenize=False)), so the fine-tune sees the format the model is
prompted with.

    python chat_to_text.py chats.jsonl data/train.jsonl              # model from training_args.yaml
    python chat_to_text.py chats.jsonl data/train.jsonl --model PATH # a local tokenizer folder or hub id

A gated model's tokenizer needs HF_TOKEN (see README.md). A bad row stops with its line number.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def convert(rows, template) -> list[str]:
    """One {"text": ...} JSON line per chat; ValueError naming the 1-based line of a bad row."""
    out = []
    for n, line in rows:
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: not JSON ({exc.msg})") from None
        messages = row.get("messages") if isinstance(row, dict) else None
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            raise ValueError(f"line {n}: needs a non-empty 'messages' list of {{'role': str, 'content': str}}")
        out.append(json.dumps({"text": template(messages)}, ensure_ascii=False))
    return out


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="chat JSONL: one {'messages': [...]} per line")
    p.add_argument("target", type=Path, help="text JSONL for train.py (data.path in training_args.yaml)")
    p.add_argument("--model", help="tokenizer (hub id or folder) [model.name_or_path in training_args.yaml]")
    args = p.parse_args(argv)
    model = args.model
    if model is None:
        import yaml

        model = yaml.safe_load((here / "training_args.yaml").read_text(encoding="utf-8"))["model"]["name_or_path"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model, token=os.environ.get("HF_TOKEN") or None)
    if not getattr(tok, "chat_template", None):
        print(f"chat_to_text.py: {model} has no chat template; give --model a tokenizer that has one", file=sys.stderr)
        return 2
    text = args.source.read_text(encoding="utf-8")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    try:
        out = convert(lines, lambda messages: tok.apply_chat_template(messages, tokenize=False))
    except ValueError as exc:
        print(f"chat_to_text.py: {args.source}: {exc}", file=sys.stderr)
        return 2
    args.target.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.target.with_name(f".{args.target.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in out), encoding="utf-8")
    os.replace(tmp, args.target)
    print(f"chat_to_text.py: wrote {len(out)} rows to {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
