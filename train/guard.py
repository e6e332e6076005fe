"""Loss-spike guard: notice a spike, judge the batch that caused it, decide how to recover.

Large runs spike: the loss jumps, or the gradient norm explodes, and left alone the run either
recovers slowly or diverges. The usual remedy (PaLM section 5.1, OPT's logbook) is to roll
back to a healthy checkpoint and skip the batches around the spike, or to lower the learning
rate. This module holds the decisions, not the mechanics; the trainer owns checkpoints,
rollbacks and the learning rate, and asks three questions here:

1. `SpikeDetector.check(loss, grad_norm)`: is this step a spike? Checked before the update is
   applied, so a spike never reaches the weights. Healthy losses are then `record`ed.
2. `batch_looks_normal(tokens, ...)`: did the offending batch look like ordinary text? A
   garbled or degenerate batch is skipped; a normal one means the optimisation itself went
   wrong, and the learning rate is lowered instead.
3. `RecoveryPolicy.decide(step, batch_normal)`: roll back and skip, roll back and lower the
   LR, or stop for a person because rolling back has already failed twice in this region.

Everything is plain Python and numpy (no torch), and every piece of state is a JSON-friendly
dict so it can ride along in a checkpoint.
"""

from __future__ import annotations

import math
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np


@dataclass
class GuardConfig:
    # `enabled` is read by the trainer (it skips the guard altogether); the classes here
    # always check when asked.
    enabled: bool = True
    spike_ratio: float = 0.20  # loss > (1 + ratio) * baseline is a spike
    # baseline = the lowest moving average (over baseline_smoothing steps) among the last
    # baseline_window healthy losses: "loss up > 20% within 100 steps". The smoothing keeps
    # one lucky batch from setting the bar; a plain mean would lag far behind early on,
    # when the loss is still falling fast.
    baseline_window: int = 100
    baseline_smoothing: int = 5
    zscore: float = 6.0  # (loss - mean) / std over the z window above this is a spike
    zscore_window: int = 50
    min_history: int = 10  # no loss-based detection until this many healthy steps are recorded
    grad_norm_warn: float = 10.0  # pre-clip grad norm above: a warning, the step goes on
    grad_norm_stop: float = 100.0  # above: a spike (the update is not applied)
    max_rollbacks: int = 2  # a spike in a region that already had this many rollbacks stops
    region_steps: int = 100  # spikes this close to an earlier rollback's spike share its region
    lr_backoff: float = 0.85  # LR multiplier when the batch looks normal (DESIGN: lower 10-20%)
    garbled_max: float = 0.01  # max fraction of U+FFFD / control chars in the decoded batch
    min_doc_tokens: float = 8.0  # mean document length (tokens between EOS) below this: abnormal
    max_repeat_fraction: float = 0.5  # one token id filling more of a sample than this: abnormal
    # Unigram surprise: the batch's mean -log p(token) under the corpus's unigram
    # distribution, over that distribution's entropy. Ordinary batches sit near 1; ids that
    # are not this tokenizer's text (random, misaligned, another tokenizer's shards) are
    # rare tokens far more often than text is.
    max_surprise_ratio: float = 1.25

    def __post_init__(self) -> None:
        problems = []
        if self.spike_ratio <= 0:
            problems.append(f"spike_ratio must be > 0 (got {self.spike_ratio})")
        if not 1 <= self.baseline_smoothing <= self.baseline_window:
            problems.append(
                f"baseline_smoothing must be in [1, baseline_window] (got "
                f"{self.baseline_smoothing})"
            )
        if self.baseline_window < 1 or self.zscore_window < 2:
            problems.append(
                f"baseline_window must be >= 1 and zscore_window >= 2 (got "
                f"{self.baseline_window}, {self.zscore_window}): a std needs two losses"
            )
        if not 2 <= self.min_history <= max(self.baseline_window, self.zscore_window):
            problems.append(
                f"min_history must be between 2 and the larger window "
                f"({max(self.baseline_window, self.zscore_window)}), got {self.min_history}: "
                f"the detector keeps no more history than its windows"
            )
        if self.zscore <= 0:
            problems.append(f"zscore must be > 0 (got {self.zscore})")
        if not 0 < self.grad_norm_warn <= self.grad_norm_stop:
            problems.append(
                f"need 0 < grad_norm_warn <= grad_norm_stop "
                f"(got {self.grad_norm_warn}, {self.grad_norm_stop})"
            )
        if self.max_rollbacks < 0 or self.region_steps < 0:
            problems.append(
                f"max_rollbacks and region_steps must be >= 0 "
                f"(got {self.max_rollbacks}, {self.region_steps})"
            )
        if not 0 < self.lr_backoff < 1:
            problems.append(
                f"lr_backoff must be in (0, 1): it multiplies the LR to lower it "
                f"(got {self.lr_backoff}; 0.85 lowers it by 15%)"
            )
        if not 0 <= self.garbled_max <= 1 or not 0 < self.max_repeat_fraction <= 1:
            problems.append(
                f"garbled_max must be in [0, 1] and max_repeat_fraction in (0, 1] "
                f"(got {self.garbled_max}, {self.max_repeat_fraction})"
            )
        if self.max_surprise_ratio <= 1:
            problems.append(f"max_surprise_ratio must be > 1 (got {self.max_surprise_ratio})")
        if self.min_doc_tokens < 0:
            problems.append(f"min_doc_tokens must be >= 0 (got {self.min_doc_tokens})")
        if problems:
            raise ValueError("guard config: " + "; ".join(problems))


# --- spike detection ------------------------------------------------------------------------


@dataclass
class Verdict:
    kind: Literal["ok", "warn", "spike"]
    reasons: list[str] = field(default_factory=list)


class SpikeDetector:
    """Judges each step's loss and pre-clip gradient norm against recent healthy history.

    Three signals, any of which makes a spike:
    - a non-finite loss or gradient norm (always, even on the first step);
    - a gradient norm above `grad_norm_stop` once `min_history` healthy losses are recorded
      (above `grad_norm_warn`, or above the stop before that, is only a warning);
    - once `min_history` healthy losses are recorded: the loss more than `spike_ratio` above
      the lowest `baseline_smoothing`-step moving average of the last `baseline_window` of
      them (a large jump, or a slow climb within the window), or more than
      `zscore` standard deviations above the mean of the last `zscore_window` (the sudden jump
      that is small in ratio terms but far outside the step-to-step noise late in training).

    Only upward moves count: a loss that drops is never a spike.
    """

    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.history: deque[float] = deque(maxlen=max(cfg.baseline_window, cfg.zscore_window))

    def check(self, loss: float, grad_norm: float) -> Verdict:
        """The verdict on one step. Does not record: call `record` once the step is kept."""
        cfg = self.cfg
        spikes: list[str] = []
        warnings: list[str] = []

        loss, grad_norm = float(loss), float(grad_norm)
        if not math.isfinite(loss):
            spikes.append("non_finite_loss")
        if not math.isfinite(grad_norm):
            spikes.append("non_finite_grad_norm")
        elif grad_norm > cfg.grad_norm_stop and len(self.history) < cfg.min_history:
            # The first steps from a random init often have large gradients: only a warning
            # until there is a history to call the run healthy against.
            warnings.append(f"grad_norm {grad_norm:.4g} > {cfg.grad_norm_stop:g} (warn: early)")
        elif grad_norm > cfg.grad_norm_stop:
            spikes.append(f"grad_norm {grad_norm:.4g} > {cfg.grad_norm_stop:g}")
        elif grad_norm > cfg.grad_norm_warn:
            warnings.append(f"grad_norm {grad_norm:.4g} > {cfg.grad_norm_warn:g} (warn)")

        if math.isfinite(loss) and len(self.history) >= cfg.min_history:
            history = np.asarray(self.history, dtype=np.float64)

            recent = history[-cfg.baseline_window :]
            k = min(cfg.baseline_smoothing, recent.size)
            baseline = float(np.convolve(recent, np.ones(k) / k, mode="valid").min())
            if baseline > 0 and loss > (1 + cfg.spike_ratio) * baseline:
                spikes.append(
                    f"loss_ratio {loss / baseline:.2f} > {1 + cfg.spike_ratio:.2f} "
                    f"over baseline {baseline:.4g}"
                )

            window = history[-cfg.zscore_window :]
            mean, std = float(window.mean()), float(window.std())
            # A flat window (std 0, or rounding noise around it: bf16 losses can repeat
            # exactly) has no scale to measure sigmas in; any rise would be "infinitely many
            # sigmas". Skip the z-score there and let the ratio check guard.
            if std > 1e-9 * max(abs(mean), 1.0):
                z = (loss - mean) / std
                if z > cfg.zscore:
                    spikes.append(f"zscore {z:.1f} > {cfg.zscore:.1f}")

        if spikes:
            return Verdict("spike", spikes + warnings)
        if warnings:
            return Verdict("warn", warnings)
        return Verdict("ok", [])

    def record(self, loss: float) -> None:
        """Adds the loss of a kept (healthy) step to the history."""
        loss = float(loss)
        if not math.isfinite(loss):
            # One NaN in the history would make every later baseline NaN and blind the guard.
            raise ValueError(f"record() takes healthy losses only, got {loss}")
        self.history.append(loss)

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # The deque keeps the current config's window; a longer saved history is trimmed.
        self.history.clear()
        self.history.extend(float(x) for x in state["history"])


# --- does the batch look like text? ---------------------------------------------------------


def _garbled_chars(text: str) -> int:
    """U+FFFD (what invalid UTF-8 decodes to) plus control characters other than \\n \\t \\r."""
    return sum(
        1
        for ch in text
        if ch == "\ufffd" or (ch not in "\n\t\r" and unicodedata.category(ch) == "Cc")
    )


def batch_looks_normal(
    tokens: np.ndarray,
    eos_id: int,
    cfg: GuardConfig,
    decode: Callable[[list[int]], str] | None = None,
    unigram_logp: np.ndarray | None = None,
) -> tuple[bool, list[str]]:
    """Whether one (B, T) batch of token ids looks like ordinary packed text, and if not, why.

    Three checks, each aimed at a way a shard goes bad:
    - Mean document length. Documents are packed into samples separated by EOS, so a
      document is a maximal run of non-EOS tokens within a sample; a document cut by the
      sample boundary counts as one (that only shortens long documents, which are far above
      the threshold anyway). Mean length = non-EOS tokens / number of runs; a batch with no
      runs (all EOS) has length 0. Tiny documents mean a broken splitter or empty pages.
    - Repetition. A single token id filling more than `max_repeat_fraction` of any sample
      (padding, a run of one byte, a page of "aaaa...") is not text.
    - Garbling, when `decode` is given: the fraction of U+FFFD and control characters in the
      decoded batch. Random or misaligned ids decode through byte-fallback pieces into invalid
      UTF-8, which shows up here; real text has next to none.
    - Unigram surprise, when `unigram_logp` (log-probability of every token id in the
      corpus) is given: the batch's mean -log p over the entropy. This one needs no decoding
      and scales with the vocabulary: at 32k pieces, random ids rarely hit byte-fallback
      pieces, so the garbling check alone would miss them, but they are rare tokens.
    """
    batch = np.asarray(tokens)
    if batch.ndim != 2 or batch.size == 0:
        raise ValueError(f"tokens must be a non-empty (batch, seq_len) array, got {batch.shape}")
    reasons: list[str] = []

    is_text = batch != eos_id
    run_starts = is_text.copy()
    run_starts[:, 1:] &= ~is_text[:, :-1]
    n_docs = int(run_starts.sum())
    mean_doc = float(is_text.sum()) / n_docs if n_docs else 0.0
    if mean_doc < cfg.min_doc_tokens:
        reasons.append(f"mean_doc_tokens {mean_doc:.1f} < {cfg.min_doc_tokens:g}")

    worst_fraction, worst_sample, worst_id, n_repetitive = 0.0, 0, 0, 0
    for i, sample in enumerate(batch):
        ids, counts = np.unique(sample, return_counts=True)
        top = int(counts.argmax())
        fraction = counts[top] / sample.size
        if fraction > cfg.max_repeat_fraction:
            n_repetitive += 1
        if fraction > worst_fraction:
            worst_fraction, worst_sample, worst_id = float(fraction), i, int(ids[top])
    if n_repetitive:
        reasons.append(
            f"repeat_fraction {worst_fraction:.2f} > {cfg.max_repeat_fraction:.2f} "
            f"(token {worst_id} in sample {worst_sample}; {n_repetitive} of {len(batch)} samples)"
        )

    if decode is not None:
        text = "".join(decode([int(t) for t in sample]) for sample in batch)
        garbled = _garbled_chars(text)
        fraction = garbled / len(text) if text else 0.0
        if fraction > cfg.garbled_max:
            reasons.append(
                f"garbled {fraction:.3f} > {cfg.garbled_max:g} "
                f"({garbled} of {len(text)} chars are U+FFFD or control)"
            )

    if unigram_logp is not None:
        logp = np.asarray(unigram_logp, dtype=np.float64)
        entropy = float(-(np.exp(logp) * logp).sum())
        ids = np.clip(batch, 0, logp.size - 1)
        surprise = float(-logp[ids].mean())
        if entropy > 0 and surprise / entropy > cfg.max_surprise_ratio:
            reasons.append(
                f"unigram_surprise {surprise / entropy:.2f} > {cfg.max_surprise_ratio:g} "
                f"x entropy {entropy:.2f} nats"
            )

    return not reasons, reasons


# --- what to do about a spike ---------------------------------------------------------------


@dataclass
class Action:
    kind: Literal["rollback_skip", "rollback_lower_lr", "stop"]
    lr_scale: float = 1.0  # multiply the current LR by this (1.0 unless rollback_lower_lr)
    message: str = ""


class RecoveryPolicy:
    """Decides how to recover from a spike, remembering the rollbacks already made.

    Spikes are grouped into regions: a spike within `region_steps` of an earlier rollback's
    spike (either side: after a rollback the run replays steps before the old spike) is the
    same trouble coming back. Once a region has had `max_rollbacks` rollbacks, another one is
    unlikely to help and the run stops for a person.

    The trainer keeps this object in memory across a rollback (restoring the model must not
    restore an earlier, shorter list of rollbacks) and also saves it in checkpoints, so a
    restarted run still knows.
    """

    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.rollbacks: list[int] = []  # the spike step of every rollback made, in order

    def decide(self, step: int, batch_normal: bool) -> Action:
        cfg = self.cfg
        nearby = [s for s in self.rollbacks if abs(step - s) <= cfg.region_steps]
        if len(nearby) >= cfg.max_rollbacks:
            lo, hi = min(nearby + [step]), max(nearby + [step])
            earlier = ", ".join(str(s) for s in nearby) or "none"
            return Action(
                "stop",
                message=(
                    f"loss spike at step {step} after {len(nearby)} rollback(s) in steps "
                    f"{lo}-{hi} (spikes at steps {earlier}); rolling back again is unlikely to "
                    f"help. Look at the offending batches' document ids written for those "
                    f"steps, the loss and grad-norm curves around steps {lo}-{hi}, and the "
                    f"learning rate; then resume from the last healthy checkpoint, with bad "
                    f"documents quarantined or a lower LR."
                ),
            )

        self.rollbacks.append(step)
        if not batch_normal:
            return Action(
                "rollback_skip",
                message=f"loss spike at step {step}: the batch looks abnormal; "
                f"rolling back and skipping it",
            )
        return Action(
            "rollback_lower_lr",
            lr_scale=cfg.lr_backoff,
            message=f"loss spike at step {step} on a normal-looking batch; rolling back and "
            f"lowering the LR to {cfg.lr_backoff:g}x",
        )

    def state_dict(self) -> dict[str, Any]:
        return {"rollbacks": list(self.rollbacks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rollbacks = [int(s) for s in state["rollbacks"]]
