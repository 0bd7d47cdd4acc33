"""A pretraining run worked out before it starts: what ``pretrain --dry-run`` prints
(docs/pretraining.md#check-a-run-before-it-starts-dry-run); the parameters, FLOPs and
memory come from the objective (:mod:`~keras_electra.pretraining.flops`,
:mod:`~keras_electra.pretraining.memory`, the latter an estimate)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from keras_electra.config import ElectraConfig
from keras_electra.data.files import is_remote
from keras_electra.data.tfrecords import count_examples, is_tfrecord_input
from keras_electra.pretraining import objectives
from keras_electra.run_directory import RunDirectory
from keras_electra.settings import PretrainSettings
from keras_electra.training.strategy import cluster_size

DRY_RUN_NOTE = "Dry run: every input checked; nothing was trained or written."

# Device counts the memory per device is shown for when the strategy's devices are not
# on the machine that plans the run (a TPU host's cores, several GPUs or workers).
DEVICE_COUNTS = (1, 2, 4, 8, 16, 32)


@dataclass
class PretrainPlan:
    """What a pretraining run will do, checked but not started.

    Attributes:
        settings: the resolved settings (the preset's defaults filled in).
        run_dir: the run directory.
        config: the model's config (for a vocabulary still to be learned, with the size
            it will have).
        start_step: the step the run starts from (a resumed run's latest checkpoint).
        resumed: the run directory holds a run that this one continues.
        vocabulary: where the vocabulary comes from, and its size.
        data: the corpus: its kind, files and examples.
        replicas: the devices that share each batch here, or None where only the run
            can tell (a TPU, GPUs this machine lacks, several workers).
        devices: what those devices are.
        objective: the settings' objective, looked up.
        memory_here: the bytes of memory each of those devices has, where the plan can
            tell (the CPU's: this machine's memory), else None.
        notes: what the run would say before its first step (the flags a resumed run
            goes on with changed, a vocabulary that does not cover the corpus).
    """

    settings: PretrainSettings
    run_dir: Path
    config: ElectraConfig
    start_step: int
    resumed: bool
    vocabulary: str
    data: str
    replicas: int | None
    devices: str
    objective: objectives.Objective
    memory_here: int | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def parameters(self) -> dict[str, int]:
        """The weights pretraining trains, by part."""
        return self.objective.parameters(self.config)

    def tokens_per_step(self) -> int:
        return self.settings.batch_size * self.settings.max_seq_length

    def flops_per_step(self) -> float:
        """Matmul FLOPs of one step (forward and backward, the global batch)."""
        s = self.settings
        return self.objective.step_flops(self.config, s.batch_size, s.max_seq_length)

    def memory_per_device(self, replicas: int) -> dict[str, float]:
        """Estimated bytes per device with ``replicas`` devices sharing the batch, by part."""
        s = self.settings
        sequences = max(1, s.batch_size // replicas // s.grad_accumulation)
        return self.objective.step_memory(self.config, sequences, s.max_seq_length, s.precision)

    def describe(self) -> str:
        """The plan as the command prints it: one line per subject."""
        s, c = self.settings, self.config
        disc, gen = c.discriminator_config(), c.generator_config()
        run = RunDirectory(self.run_dir)
        rows = {}
        if not self.resumed:
            rows["run"] = f"{self.run_dir} (a new run)"
        elif self.start_step >= s.steps:
            rows["run"] = f"{self.run_dir}: already at step {self.start_step:,}; nothing to train"
        else:
            rows["run"] = f"{self.run_dir}: resumes at step {self.start_step:,}"
        if s.init and not self.resumed:
            rows["run"] += f", from the weights of --init {s.init}"
        towers = f"{disc.num_layers} layers x {disc.hidden_size} ({disc.num_heads} heads, "
        towers += f"feed-forward {disc.intermediate_size}), embeddings {c.embedding_size}"
        if "generator" in self.parameters():
            towers += f", generator {gen.num_layers} x {gen.hidden_size}"
        rows["model"] = f"{s.preset}: {towers}, sharing {c.embedding_sharing}"
        values = self.objective.hyperparameter_values().items()
        shown = ", ".join(f"{k} {format_value(v)}" for k, v in values)
        rows["objective"] = f"{s.objective}: {shown}" if shown else s.objective
        rows["parameters"] = (
            f"{format_count(c.backbone_parameters())} in the discriminator (fine-tuned and "
            f"exported), {format_count(sum(self.parameters().values()))} trained in pretraining"
        )
        rows["vocabulary"] = self.vocabulary
        rows["data"] = self.data
        rows["steps"] = (
            f"{s.steps:,} (warm-up {s.warmup_steps:,}), learning rate {s.learning_rate:g}, "
            f"{s.optimizer}{'' if s.bias_correction else ' without bias correction'}, "
            f"batch {s.batch_size:,} x {s.max_seq_length} tokens"
            + (f" in {s.grad_accumulation} micro-batches" if s.grad_accumulation > 1 else "")
        )
        if note := warmup_note(s):
            rows["warm-up"] = note
        remaining = max(0, s.steps - self.start_step)
        rows["per step"] = (
            f"{self.tokens_per_step():,} tokens, {format_flops(self.flops_per_step())} (matmuls, "
            f"forward + backward); {format_flops(remaining * self.flops_per_step())} to step "
            f"{s.steps:,}"
        )
        rows["devices"] = f"--strategy {s.strategy}: {self.devices}; --precision {s.precision}"
        rows["memory"] = self._memory_row()
        every = f"every {s.checkpoint_every:,} steps, the last {s.keep_checkpoints} kept"
        rows["checkpoint"] = f"{run.checkpoint_dir} {every}"
        rows["metrics"] = f"{run.metrics_file} every {s.log_every:,} steps, {run.logs_dir}"
        asked = os.environ.get("KERAS_ELECTRA_KERNELS")
        rows["kernels"] = (
            f"KERAS_ELECTRA_KERNELS={asked}"
            if asked
            else "chosen when the run starts (compiled C++ on a CPU with g++, else XLA)"
        )
        rows.update(self.notes)
        width = max(map(len, rows))
        lines = [DRY_RUN_NOTE, *(f"  {k.ljust(width)}  {v}" for k, v in rows.items())]
        return "\n".join(lines)

    def _memory_row(self) -> str:
        """The memory estimate: for this machine's devices, or for several device counts."""
        s = self.settings
        if self.replicas is not None:
            parts = self.memory_per_device(self.replicas)
            sequences = max(1, s.batch_size // self.replicas // s.grad_accumulation)
            shown = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items())
            row = (
                f"~{format_bytes(sum(parts.values()))} per device, estimated ({shown}; "
                f"{sequences:,} sequences per device and micro-batch; TensorFlow's own "
                "memory not included)"
            )
            if self.memory_here is not None and sum(parts.values()) > self.memory_here:
                one = self.objective.step_memory(self.config, 1, s.max_seq_length, s.precision)
                fix = (  # the length when even one sequence per step is too much
                    f"lower --max-seq-length (one sequence of {s.max_seq_length:,} tokens "
                    f"needs ~{format_bytes(sum(one.values()))})"
                    if sum(one.values()) > self.memory_here
                    else "lower --batch-size or raise --grad-accumulation"
                )
                row += (
                    f"; more than the {format_bytes(self.memory_here)} this machine has, so the "
                    f"run would run out of memory: {fix}"
                )
            return row
        # Several workers: at least one device each, as many on each; mirrored: at least
        # two devices (one would be refused when the run starts).
        workers = cluster_size(s.strategy)
        least = 2 if s.strategy == "mirrored" else 1
        runnable = [workers * k for k in DEVICE_COUNTS if k >= least]
        counts = [
            n
            for n in runnable
            if s.batch_size % n == 0 and (s.batch_size // n) % s.grad_accumulation == 0
        ]
        if not counts:
            split = f"--batch-size {s.batch_size:,}" + (
                f" in {s.grad_accumulation} micro-batches" if s.grad_accumulation > 1 else ""
            )
            listed = ", ".join(map(str, runnable[:-1])) + f" or {runnable[-1]}"
            return f"not estimated: {split} does not split evenly over {listed} devices"
        shown = ", ".join(
            f"{format_bytes(sum(self.memory_per_device(n).values()))} with {n}" for n in counts
        )
        return f"~{shown} devices: per device, estimated (TensorFlow's own memory not included)"


def warmup_note(settings: PretrainSettings) -> str | None:
    """The line a run prints, and its dry run's plan shows, when its warm-up is longer than
    the run (the tiny preset's 100 steps for ``--steps 20``): the learning rate climbs to
    the schedule (:class:`~keras_electra.training.optimizer.WarmupLinearDecay`, the decay
    times the warm-up) peaks mid-run at ``steps / (4 * warmup_steps)`` of the peak and
    falls to 0; else None.

    Examples:
        >>> settings = PretrainSettings(corpus=["a.txt"], steps=20).resolved()
        >>> print(warmup_note(settings))
        Warm-up (--warmup-steps 100) is longer than the run (--steps 20): the learning
        rate peaks mid-run at 2.5e-05, 5% of --learning-rate 0.0005, and falls to 0; pass a
        smaller --warmup-steps, such as 2 (a tenth of --steps), to change it.
        >>> warmup_note(PretrainSettings(corpus=["a.txt"], steps=100).resolved()) is None
        True

        A run under 10 steps has no room for a warm-up (a tenth of it rounds to none; one
        step of warm-up would train its first step at a learning rate of 0):

        >>> print(warmup_note(PretrainSettings(corpus=["a.txt"], steps=5).resolved()))
        Warm-up (--warmup-steps 100) is longer than the run (--steps 5): the learning
        rate peaks mid-run at 6.25e-06, 1% of --learning-rate 0.0005, and falls to 0; pass
        --warmup-steps 0 to turn warm-up off (the learning rate starts at its peak).
    """
    s = settings
    if s.warmup_steps <= s.steps:
        return None
    advice = (
        f"pass a smaller --warmup-steps, such as {s.steps // 10} (a tenth of --steps), to "
        "change it."
        if s.steps >= 10
        else "pass --warmup-steps 0 to turn warm-up off (the learning rate starts at its peak)."
    )
    share = s.steps / (4 * s.warmup_steps)  # peak * (t / W) * (1 - t / T) at t = T / 2
    return (
        f"Warm-up (--warmup-steps {s.warmup_steps:,}) is longer than the run (--steps "
        f"{s.steps:,}): the learning rate peaks mid-run at {share * s.learning_rate:.3g}, "
        f"{share:.0%} of --learning-rate {s.learning_rate:g}, and falls to 0; {advice}"
    )


def format_value(value) -> str:
    """A setting's value as the plan shows it: ``50``, ``0.5``, ``false``."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_data(settings: PretrainSettings, files: list[str]) -> str:
    """The corpus in a line: TFRecords (files, examples and their length) or text (files,
    size; packed as it is read)."""
    count = f"{len(files):,} file{'s' if len(files) != 1 else ''}"
    if is_tfrecord_input(settings.corpus):
        examples = count_examples(files)
        line = f"TFRecords: {count} of {settings.max_seq_length}-token examples"
        if examples:
            passes = settings.steps * settings.batch_size / examples
            shown = f"{passes:,.0f}" if passes >= 10 else f"{passes:.1f}"
            line += f", {examples:,} of them ({shown} passes to step {settings.steps:,})"
        return line
    local = [f for f in files if not is_remote(f)]
    size = sum(os.path.getsize(f) for f in local)
    return (
        f"text: {count}, {size / 1e6:,.1f} MB, packed into {settings.max_seq_length}-token "
        "examples as it is read"
    )


def format_count(count: int) -> str:
    """A parameter count as a reader takes it in: ``'108.9 M'``, or the number below 100,000."""
    return f"{count / 1e6:,.1f} M" if count >= 1e5 else f"{count:,}"


def format_flops(value: float) -> str:
    """FLOPs in the largest unit below them.

    Examples:
        >>> format_flops(8.75e12), format_flops(3e21)
        ('8.75 TFLOPs', '3,000.00 EFLOPs')
    """
    for unit, scale in (("EFLOPs", 1e18), ("PFLOPs", 1e15), ("TFLOPs", 1e12), ("GFLOPs", 1e9)):
        if value >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value / 1e6:,.2f} MFLOPs"


def format_bytes(value: float) -> str:
    """Bytes in TB (from 10 TB), GB (from 0.1 GB) or MB."""
    if value >= 1e13:
        return f"{value / 1e12:,.0f} TB"
    return f"{value / 1e9:,.1f} GB" if value >= 1e8 else f"{value / 1e6:,.0f} MB"
