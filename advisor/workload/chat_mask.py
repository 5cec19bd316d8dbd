"""Which tokens of a chat carry the loss: the assistant's, found from the model's own chat template.

One module, two users: `gpu-advisor plan --dataset` counts the tokens that carry loss with it, and every launch
bundle ships this file beside train.py (`chat_mask.py`), which builds the training labels with it wherever TRL's
own assistant-only masking cannot run. It imports nothing, so it runs in the bundle without gpu-advisor.

TRL 1.16.0 masks assistant tokens (SFTConfig.assistant_only_loss) only through `{% generation %}` markers in the
chat template, and patches the templates it knows (trl/chat_template_utils.py get_training_chat_template: Qwen2.5,
Qwen3, Gemma, Gemma 3, Llama 3, Phi-3, DeepSeek...); any other template -- Llama 3.1 / 3.2 / 3.3, Mistral, Phi-4 --
raises there. Here the template itself says where each assistant turn is: for assistant message i, the text
rendered for messages[:i] with the generation prompt ends where the turn starts, and the text rendered for
messages[:i + 1] ends where it stops (its end-of-turn token included, so the model learns to stop). That needs a
prefix-preserving template (rendering more messages only appends text), which every template above is on plain
conversations; one that is not is refused with NotPrefixPreserving rather than masked wrongly.
"""

from __future__ import annotations

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy (and TRL's fused LM head) skips


class NotPrefixPreserving(ValueError):
    """The chat template renders an earlier turn differently once later turns follow."""


def assistant_char_spans(render, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """(the conversation's text, [start, end) character spans of its assistant turns).

    `render(messages, add_generation_prompt)` is the tokenizer's apply_chat_template(..., tokenize=False)."""
    full = render(messages, False)
    spans = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        try:
            before = render(messages[:i], True)
        except Exception:  # noqa: BLE001 - a template that refuses an empty or system-only prompt: from the start
            before = ""
        upto = render(messages[: i + 1], False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise NotPrefixPreserving(f"message {i + 1}: the chat template renders the conversation so far "
                                      "differently once later messages follow")
        spans.append((len(before), len(upto)))
    return full, spans


def token_mask(offsets, spans: list[tuple[int, int]]) -> list[int]:
    """1 for each token whose text starts inside a span, else 0. `offsets`: (start, end) characters per token,
    as a fast tokenizer returns them (return_offsets_mapping / Encoding.offsets)."""
    mask = []
    spans = sorted(spans)
    j = 0
    for start, _end in offsets:
        while j < len(spans) and spans[j][1] <= start:
            j += 1
        mask.append(1 if j < len(spans) and spans[j][0] <= start < spans[j][1] else 0)
    return mask


def chat_labels(tokenizer, messages: list[dict], chat_template: str | None = None) -> dict:
    """{"input_ids", "labels"} of one conversation with a transformers tokenizer: the chat template's text,
    tokenized once (the template writes its own special tokens), with IGNORE_INDEX on every token outside the
    assistant turns."""
    def render(msgs, generation_prompt):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation_prompt,
                                             chat_template=chat_template)

    text, spans = assistant_char_spans(render, messages)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = token_mask(enc["offset_mapping"], spans)
    ids = list(enc["input_ids"])
    return {"input_ids": ids, "labels": [t if m else IGNORE_INDEX for t, m in zip(ids, mask)]}
