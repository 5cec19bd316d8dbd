"""What a dataset's token lengths cost to train on: truncation, packing, padding, a better seq_len.

Pure arithmetic over an array of per-row token counts (advisor/workload/dataset_tokens.py counts them), so
every figure `tokens` and `plan --dataset` print comes from `length_stats` and nowhere else.

- Truncation keeps min(length, seq_len) of each row (TRL SFTConfig max_length "keep_start",
  https://github.com/huggingface/trl trl/trainer/sft_config.py; LLaMA-Factory cutoff_len).
- Packed batches compute exactly the kept tokens (rows concatenated into seq_len windows).
- Padded batches of `micro_batch` rows compute micro_batch × the longest kept row of each batch.
  The Trainer draws batches at random (transformers Trainer._get_train_sampler: RandomSampler), so a
  batch is a uniformly random k-subset and the computed tokens are rows × E[max of k rows], which
  has a closed form over the sorted lengths (no simulation, no seed): P(max = l_(i)) = C(i-1, k-1) /
  C(n, k). With `group_by_length` the batches hold rows of similar length
  (transformers trainer_pt_utils.get_length_grouped_indices sorts megabatches of 50 × k rows); it is
  modelled as consecutive k-row chunks of the fully sorted lengths, the lower bound of that scheme.
- Percentiles are nearest-rank (a length some row really has).
- A sample of n rows out of N estimates totals as N × the sample mean, with a 95 % half-width of
  1.96 × N × s / sqrt(n) × sqrt(1 - n / N) (finite-population correction): 0 when every row is counted.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # numpy is imported where it is used: `import advisor.workload.length_stats` stays cheap
    import numpy as np

Z95 = 1.959963984540054  # two-sided 95 % quantile of the standard normal
SEQ_LEN_STEP = 256  # the suggested seq_len is the p99 rounded up to a multiple of this
HIST_BINS = 24


class LengthStats(BaseModel):
    """Token counts of a dataset at one seq_len and micro-batch (estimates when `exact` is false)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int = Field(description="rows in the dataset")
    counted_rows: int = Field(description="rows tokenized (all of them when exact)")
    exact: bool
    seq_len: int
    micro_batch: int
    group_by_length: bool
    total_tokens: float = Field(description="tokens of every row, untruncated")
    total_tokens_error: float = Field(0.0, description="95 % half-width of total_tokens (0 when exact)")
    kept_tokens: float = Field(description="tokens after truncating each row at seq_len (= packed compute)")
    kept_tokens_error: float = 0.0
    truncated_rows_share: float = Field(description="share of rows longer than seq_len")
    padded_tokens: float = Field(description="tokens computed with padded batches of micro_batch rows")
    padding_waste: float = Field(description="share of padded_tokens that are padding")
    p50: int
    p90: int
    p99: int
    max: int
    mean: float
    suggested_seq_len: int = Field(description="p99 rounded up to a multiple of 256")
    suggested_truncated_rows_share: float
    suggested_kept_tokens: float
    suggested_padded_tokens: float
    histogram: tuple[tuple[int, int, int], ...] = Field((), description="(low, high, rows) bins of the lengths; "
                                                                       "rows scaled to the dataset when sampled")
    padding_factors: tuple[float, ...] = Field((), description="computed / kept tokens with padded batches of 1, "
                                                               "2, ... rows (only when asked: plan --padded)")

    @property
    def packed_tokens(self) -> float:
        return self.kept_tokens


def nearest_rank(sorted_lengths: np.ndarray, p: float) -> int:
    """The p-th percentile by nearest rank: the ceil(p/100 · n)-th smallest value."""
    n = len(sorted_lengths)
    return int(sorted_lengths[max(1, math.ceil(p / 100 * n)) - 1])


def log_factorials(n: int) -> np.ndarray:
    """log(m!) for m = 0..n (a cumulative sum of logs: one pass, reused for every batch size)."""
    import numpy as np

    return np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))))


def expected_batch_max(sorted_lengths: np.ndarray, k: int, log_fact: np.ndarray | None = None) -> float:
    """E[max of k rows drawn without replacement] over ascending `sorted_lengths`."""
    import numpy as np

    n = len(sorted_lengths)
    k = min(k, n)
    if k <= 1:
        return float(sorted_lengths.mean())
    lf = log_factorials(n) if log_fact is None else log_fact
    i = np.arange(k, n + 1)  # 1-based ranks that can be a k-subset's maximum
    # log C(i-1, k-1) - log C(n, k) in log-factorials: stable for a million rows and any k
    log_w = lf[i - 1] - lf[k - 1] - lf[i - k] - (lf[n] - lf[k] - lf[n - k])
    return float(np.dot(np.exp(log_w), sorted_lengths[k - 1:]))


def padded_compute(kept_sorted: np.ndarray, micro_batch: int, group_by_length: bool,
                   log_fact: np.ndarray | None = None) -> float:
    """Tokens the GPUs compute over the counted rows when each micro-batch is padded to its longest row."""
    import numpy as np

    n = len(kept_sorted)
    if micro_batch <= 1:
        return float(kept_sorted.sum())
    if group_by_length:
        tops = kept_sorted[np.minimum(np.arange(micro_batch, n + micro_batch, micro_batch), n) - 1]
        sizes = np.diff(np.minimum(np.arange(0, n + micro_batch, micro_batch), n))
        return float(np.dot(tops, sizes))
    return n * expected_batch_max(kept_sorted, micro_batch, log_fact)


def padding_factors(kept_sorted: np.ndarray, up_to: int, group_by_length: bool) -> tuple[float, ...]:
    """Computed tokens per kept token with padded batches of 1, 2, ... `up_to` rows (index: micro-batch - 1),
    so `plan --dataset --padded` times each candidate at its own micro-batch."""
    total = float(kept_sorted.sum())
    lf = log_factorials(len(kept_sorted)) if up_to > 1 and not group_by_length else None
    # at least 1: equal lengths pad nothing, and the closed form's weights may sum to 1 - 1e-15
    return tuple(max(1.0, padded_compute(kept_sorted, k, group_by_length, lf) / total) for k in range(1, up_to + 1))


def _scaled(values: np.ndarray, rows: int) -> tuple[float, float]:
    """(estimated total over `rows`, its 95 % half-width) from the counted values."""
    n = len(values)
    total = float(values.sum()) * rows / n
    if n >= rows or n < 2:
        return total, 0.0
    s = float(values.std(ddof=1))
    return total, Z95 * rows * s / math.sqrt(n) * math.sqrt(1 - n / rows)


def _histogram(sorted_lengths: np.ndarray, scale: float) -> tuple[tuple[int, int, int], ...]:
    import numpy as np

    top = int(sorted_lengths[-1])
    width = max(1, math.ceil((top + 1) / HIST_BINS))
    counts = np.bincount(sorted_lengths // width, minlength=math.ceil((top + 1) / width))
    return tuple((b * width, (b + 1) * width - 1, round(int(c) * scale)) for b, c in enumerate(counts))


def length_stats(lengths, rows: int, seq_len: int, micro_batch: int = 1, group_by_length: bool = False,
                 padding_up_to: int = 0) -> LengthStats:
    """The statistics of `lengths` (tokens per counted row) for a dataset of `rows` rows; with
    `padding_up_to`, the padding factors of micro-batches 1..padding_up_to too."""
    import numpy as np

    lengths = np.sort(np.asarray(lengths, dtype=np.int64))
    n = len(lengths)
    if n == 0:
        raise ValueError("no rows counted")
    scale = rows / n
    kept = np.minimum(lengths, seq_len)
    total, total_err = _scaled(lengths, rows)
    kept_total, kept_err = _scaled(kept, rows)
    padded = padded_compute(kept, micro_batch, group_by_length) * scale
    p99 = nearest_rank(lengths, 99)
    suggested = max(SEQ_LEN_STEP, math.ceil(p99 / SEQ_LEN_STEP) * SEQ_LEN_STEP)
    kept_s = np.minimum(lengths, suggested)
    return LengthStats(
        rows=rows, counted_rows=n, exact=n >= rows, seq_len=seq_len, micro_batch=micro_batch,
        group_by_length=group_by_length, total_tokens=total, total_tokens_error=total_err,
        kept_tokens=kept_total, kept_tokens_error=kept_err,
        truncated_rows_share=float((lengths > seq_len).mean()), padded_tokens=padded,
        padding_waste=1 - kept_total / padded if padded else 0.0,
        p50=nearest_rank(lengths, 50), p90=nearest_rank(lengths, 90), p99=p99, max=int(lengths[-1]),
        mean=float(lengths.mean()), suggested_seq_len=suggested,
        suggested_truncated_rows_share=float((lengths > suggested).mean()),
        suggested_kept_tokens=float(kept_s.sum()) * scale,
        suggested_padded_tokens=padded_compute(kept_s, micro_batch, group_by_length) * scale,
        histogram=_histogram(lengths, scale),
        padding_factors=padding_factors(kept, padding_up_to, group_by_length) if padding_up_to else (),
    )
