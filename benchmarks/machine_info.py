"""The machine a benchmark ran on, as its results files record it: the CPU's model name
with its family and model numbers (a cloud VM's "AMD EPYC" names several generations, whose
speeds differ several times over), its core count, and whether it has AMX (bfloat16 matrix
tiles), which sets how fast training runs (``platform.processor()`` is empty on Linux, so
``/proc/cpuinfo`` is read). Results written before 2026-11-30 name the model alone.

Examples:
    >>> cpu_description().count(", ")
    2
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _field(name: str) -> str | None:
    """The first ``name : value`` line's value in /proc/cpuinfo."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return None


def _name_and_generation() -> tuple[str, str | None]:
    """The CPU's model name and 'family F model M', where /proc/cpuinfo has them."""
    name = _field("model name")
    if name is None:
        return platform.processor() or platform.machine() or "unknown CPU", None
    family, model = _field("cpu family"), _field("model")
    return name, (f"family {family} model {model}" if family and model else None)


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers ('AMD EPYC (family 26 model
    2)'), else the platform's processor or machine name."""
    name, generation = _name_and_generation()
    return f"{name} ({generation})" if generation else name


def has_amx() -> bool:
    return " amx_bf16" in _cpuinfo()


def _amx() -> str:
    return "AMX" if has_amx() else "no AMX"


def cpu_description() -> str:
    """'AMD EPYC (family 26 model 2), 2 cores, no AMX' (the ELECTRA-vs-MLM study's result
    lines)."""
    return f"{cpu_model()}, {os.cpu_count()} cores, {_amx()}"


def machine() -> str:
    """'2-core AMD EPYC (family 26 model 2, no AMX)' (the clean-clone results)."""
    name, generation = _name_and_generation()
    return f"{os.cpu_count()}-core {name} ({', '.join(filter(None, [generation, _amx()]))})"
