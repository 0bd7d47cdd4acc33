"""A fine-tuning worked out before it starts: what ``finetune --dry-run`` prints
(docs/finetuning.md); nothing is written and no weights are read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keras_electra.config import ElectraConfig
from keras_electra.finetuning.settings import FinetuneSettings
from keras_electra.pretraining.flops import BACKWARD_FACTOR, tower_flops
from keras_electra.pretraining.memory import STATE_BYTES, tower_activations
from keras_electra.pretraining.plan import DRY_RUN_NOTE, format_bytes, format_count, format_flops
from keras_electra.settings import FinetuneOptions


@dataclass
class FinetunePlan:
    """What a fine-tuning will do, checked but not started.

    Attributes:
        source: the source as given (a directory or ``hf:ORG/NAME``).
        output_dir: where the fine-tuned model goes (None: not saved).
        config: the source's model config.
        preset: the model size whose recipe the defaults follow.
        options: the resolved options (the recipe's values filled in).
        settings: what ``finetune.json`` would hold (task, labels, columns).
        train_examples: examples read from the training file.
        train_rows: the rows they encode to (QA: one per window).
        eval_examples: examples read from the evaluation file (None without one).
        steps: optimizer steps (``steps_per_epoch * epochs``).
        steps_per_epoch: batches per pass over the training rows.
        resume_step: the step an interrupted fine-tuning in ``output_dir`` resumes at.
        replaces: ``output_dir`` holds a fine-tuned model, which this one replaces.
        note: what the encoding could not keep (QA: answers in no window), or ``""``.
    """

    source: str
    output_dir: Path | None
    config: ElectraConfig
    preset: str
    options: FinetuneOptions
    settings: FinetuneSettings
    train_examples: int
    train_rows: int
    eval_examples: int | None
    steps: int
    steps_per_epoch: int
    resume_step: int = 0
    replaces: bool = False
    note: str = ""

    def flops_per_step(self) -> float:
        """Matmul FLOPs of one step of the backbone (forward and backward; the head's are
        negligible)."""
        o, c = self.options, self.config
        encoder = c.discriminator_config()
        return BACKWARD_FACTOR * tower_flops(
            encoder, c.embedding_size, o.batch_size, o.max_seq_length
        )

    def memory(self) -> dict[str, float]:
        """Estimated bytes at a step's peak: the backbone's state (weight, gradient, two
        AdamW slots) and the activations of a float32 batch."""
        o, c = self.options, self.config
        return {
            "state": STATE_BYTES * c.backbone_parameters(),
            "activations": tower_activations(
                c.discriminator_config(), o.batch_size, o.max_seq_length, "float32"
            ),
        }

    def describe(self) -> str:
        """The plan as the command prints it: one line per subject."""
        o, c, s = self.options, self.config, self.settings
        disc = c.discriminator_config()
        rows = {"source": f"{self.source} ({self.preset}: {disc.num_layers} layers x "}
        rows["source"] += f"{disc.hidden_size}, {format_count(c.backbone_parameters())} parameters)"
        labels = f"{len(s.labels)} labels ({', '.join(s.labels[:8])}"
        labels += ", ...)" if len(s.labels) > 8 else ")"
        rows["task"] = f"{s.task}" + (f", {labels}" if s.labels else "")
        rows["data"] = f"{self.train_examples:,} training examples"
        if self.train_rows != self.train_examples:
            rows["data"] += f" ({self.train_rows:,} windows)"
        if self.eval_examples is not None:
            rows["data"] += f", {self.eval_examples:,} evaluation examples"
        if self.note:
            rows["warning"] = self.note
        rows["steps"] = (
            f"{self.steps:,} ({o.epochs} epochs of {self.steps_per_epoch:,}), batch "
            f"{o.batch_size} x {o.max_seq_length} tokens, learning rate {o.learning_rate:g}, "
            f"layer decay {o.layer_decay:g}, warm-up {o.warmup_fraction:g}"
            + ("" if o.bias_correction else ", AdamW without bias correction")
            + (f"; first {o.probe_epochs} epochs train the head alone" if o.probe_epochs else "")
        )
        if self.resume_step:
            rows["steps"] += f"; resumes at step {self.resume_step:,}"
        tokens = o.batch_size * o.max_seq_length
        rows["per step"] = (
            f"{tokens:,} tokens, {format_flops(self.flops_per_step())} (the backbone's matmuls, "
            f"forward + backward); {format_flops(self.steps * self.flops_per_step())} in all"
        )
        parts = self.memory()
        shown = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items())
        rows["memory"] = f"~{format_bytes(sum(parts.values()))}, estimated ({shown})"
        rows["output"] = (
            f"{self.output_dir} (weights, finetune.json, labels.txt, eval_metrics.json)"
            if self.output_dir is not None
            else "none: the model is not saved"
        )
        if self.replaces:
            rows["output"] += "; replaces the fine-tuned model there"
        width = max(map(len, rows))
        return "\n".join([DRY_RUN_NOTE, *(f"  {k.ljust(width)}  {v}" for k, v in rows.items())])
