"""The machine a benchmark ran on, as its results files record it: the CPU's model name,
its core count, and whether it has AMX (bfloat16 matrix tiles), which sets how fast
training runs (``platform.processor()`` is empty on Linux, so ``/proc/cpuinfo`` is read).

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


def cpu_model() -> str:
    """The CPU's model name, else the platform's processor or machine name."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def has_amx() -> bool:
    return " amx_bf16" in _cpuinfo()


def cpu_description() -> str:
    """'AMD EPYC, 2 cores, no AMX' (the ELECTRA-vs-MLM study's result lines)."""
    return f"{cpu_model()}, {os.cpu_count()} cores, {'AMX' if has_amx() else 'no AMX'}"


def machine() -> str:
    """'2-core AMD EPYC (no AMX)' (the clean-clone results)."""
    return f"{os.cpu_count()}-core {cpu_model()} ({'AMX' if has_amx() else 'no AMX'})"
