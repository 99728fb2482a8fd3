"""What a child server's log says went wrong (standard library only).

``servecal bench`` and ``servecal calibrate --engine vllm`` each start a vLLM process
and, when it fails, quote one line of its log.
"""

from __future__ import annotations

from pathlib import Path


def last_error(log_path: Path) -> str:
    """The servecal line, else the last error line, of a server log."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for line in reversed(lines):
        if "servecal:" in line and ("ERROR" in line or "Error" in line):
            return line.split("servecal:", 1)[1].strip()[:300]
    for line in reversed(lines):
        if "Error" in line:
            return line.strip()[:300]
    return lines[-1][:300] if lines else "empty log"
