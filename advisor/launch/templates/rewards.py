"""GRPO reward functions for train.py (trl.GRPOTrainer reward_funcs). Edit them: these are placeholders.

Each function receives the generated `completions` (strings, or lists of chat messages for conversational data)
and every dataset column as a keyword argument (e.g. `prompts`, or your own `answer` column), and returns one float
per completion (None to skip one). GRPO normalises rewards within each prompt's group of num_generations
completions, so only their order within a group matters. TRL docs: https://huggingface.co/docs/trl/grpo_trainer
"""

from __future__ import annotations


def _text(completion) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


def reward_length(completions, **kwargs) -> list[float]:
    """Placeholder: prefers completions near 200 characters. Replace with your task's check (an exact-match answer,
    a unit test, a format regex, a reward model)."""
    return [-abs(len(_text(c)) - 200) / 200 for c in completions]


REWARD_FUNCS = [reward_length]
