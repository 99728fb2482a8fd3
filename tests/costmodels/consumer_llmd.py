"""llm-d-inference-sim's loading and start-up validation of a config file, re-implemented
for the export tests (not a test module).

Sources, read at llm-d-inference-sim **v0.10.2** (github.com/llm-d/llm-d-inference-sim,
tag v0.10.2; the rules below are unchanged at main ``eec055a``, 2026-08-20):

* ``pkg/common/config.go``: ``newConfig`` (the defaults a file is decoded over),
  ``Configuration.load`` (``yaml.Unmarshal`` from gopkg.in/yaml.v3, no strict mode: an
  unknown key is dropped without a word) and ``Configuration.validate`` (the checks);
* ``pkg/common/parser.go``: ``ParseCommandParamsAndLoadConfig`` loads the file, lets
  flags (``--model``) override it, then validates;
* Go's ``time.ParseDuration`` (``src/time/format.go``): yaml.v3 decodes a
  ``time.Duration`` field from a string with it (and refuses a YAML int there).

The std-dev checks compare in float32, ``float32(std) > 0.3*float32(mean)``: Go converts
the int64 nanoseconds to float32 and multiplies in float32, which numpy's float32 does
the same way (IEEE round to nearest).
"""

from __future__ import annotations

import re

import numpy as np

#: The Configuration fields a latency file may set: YAML key -> kind, from the struct's
#: ``yaml:"..."`` tags in config.go v0.10.2 (the ones servecal could write).
KNOWN_KEYS = {
    "model": "str",
    "max-num-seqs": "int",
    "latency-calculator": "str",
    "time-to-first-token": "duration",
    "time-to-first-token-std-dev": "duration",
    "inter-token-latency": "duration",
    "inter-token-latency-std-dev": "duration",
    "kv-cache-transfer-latency": "duration",
    "kv-cache-transfer-latency-std-dev": "duration",
    "prefill-overhead": "duration",
    "prefill-time-per-token": "duration",
    "prefill-time-std-dev": "duration",
    "kv-cache-transfer-time-per-token": "duration",
    "kv-cache-transfer-time-std-dev": "duration",
    "time-factor-under-load": "float",
}
#: newConfig()'s values for those fields (durations 0 unless set).
DEFAULTS = {"model": "", "max-num-seqs": 5, "latency-calculator": "", "time-factor-under-load": 1.0}
CALCULATORS = ("", "constant", "per-token")

_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 10**6, "s": 10**9,
          "m": 60 * 10**9, "h": 3600 * 10**9}  # fmt: skip
_TOP = 1 << 63


class SimConfigError(ValueError):
    """What the simulator would refuse at start-up, with its message."""


def parse_duration(s: str) -> int:
    """Go's ``time.ParseDuration``, step for step: nanoseconds, or SimConfigError."""
    orig, d, neg = s, 0, False
    if s and s[0] in "+-":
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if s == "":
        raise SimConfigError(f"time: invalid duration {orig!r}")
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise SimConfigError(f"time: invalid duration {orig!r}")
        m = re.match(r"[0-9]*", s)
        digits, s = m.group(0), s[m.end() :]
        v = int(digits) if digits else 0
        if v > _TOP:
            raise SimConfigError(f"time: invalid duration {orig!r}")
        pre, post, f, scale = bool(digits), False, 0, 1.0
        if s and s[0] == ".":
            s = s[1:]
            m = re.match(r"[0-9]*", s)
            frac, s = m.group(0), s[m.end() :]
            post = bool(frac)
            for c in frac:  # leadingFraction: stops accumulating at overflow
                if f > (_TOP - 1) // 10 or f * 10 + int(c) > _TOP:
                    break
                f, scale = f * 10 + int(c), scale * 10
        if not pre and not post:
            raise SimConfigError(f"time: invalid duration {orig!r}")
        m = re.match(r"[^0-9.]*", s)
        unit, s = m.group(0), s[m.end() :]
        if not unit:
            raise SimConfigError(f"time: missing unit in duration {orig!r}")
        if unit not in _UNITS:
            raise SimConfigError(f"time: unknown unit {unit!r} in duration {orig!r}")
        per = _UNITS[unit]
        if v > _TOP // per:
            raise SimConfigError(f"time: invalid duration {orig!r}")
        v *= per
        if f > 0:
            v += int(float(f) * (float(per) / scale))  # uint64(float64 product) truncates
        d += v
        if d > _TOP:
            raise SimConfigError(f"time: invalid duration {orig!r}")
    if not neg and d > _TOP - 1:
        raise SimConfigError(f"time: invalid duration {orig!r}")
    return -d if neg else d


def read_flat_yaml(text: str) -> dict[str, str]:
    """The flat ``key: value`` subset of YAML servecal writes (comment lines, no nesting):
    raw scalars by key. Anything else fails, so a writer drifting off it is caught."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"([a-z][a-z0-9-]*): (\S.*)", line)
        assert m, f"not a flat 'key: value' line: {line!r}"
        assert m.group(1) not in out, f"key {m.group(1)} twice"
        out[m.group(1)] = m.group(2)
    return out


def decode(raw: dict[str, str]) -> dict[str, object]:
    """yaml.v3's decoding of each scalar into its Configuration field (the kinds above)."""
    doc: dict[str, object] = {}
    for key, value in raw.items():
        kind = KNOWN_KEYS.get(key)
        if kind is None:
            raise SimConfigError(f"unknown key {key!r}: the simulator would ignore it")
        quoted = re.fullmatch(r'"([^"\\]*)"', value)
        text = quoted.group(1) if quoted else value
        if kind == "duration":
            if not quoted and re.fullmatch(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", value):
                raise SimConfigError(f"cannot unmarshal number {value} into time.Duration")
            doc[key] = parse_duration(text)
        elif kind == "int":
            if quoted or not re.fullmatch(r"[-+]?[0-9]+", value):
                raise SimConfigError(f"cannot unmarshal {value} into int ({key})")
            doc[key] = int(value)
        elif kind == "float":
            if quoted or not re.fullmatch(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)", value):
                raise SimConfigError(f"cannot unmarshal {value} into float64 ({key})")
            doc[key] = float(value)
        else:
            doc[key] = text
    return doc


def _over_30(std: int, mean: int) -> bool:
    return bool(np.float32(std) > np.float32(0.3) * np.float32(mean))


def validate(text: str, model: str = "served-model") -> dict[str, object]:
    """Load ``text`` as ``--config`` with ``--model model`` on the command line and run
    ``validate()``'s checks on the fields above; the merged values, or SimConfigError."""
    c: dict[str, object] = {k: 0 for k, kind in KNOWN_KEYS.items() if kind == "duration"}
    c.update(DEFAULTS)
    c.update(decode(read_flat_yaml(text)))
    if model:
        c["model"] = model
    if c["model"] == "":
        raise SimConfigError("model parameter is empty")
    for mean, std, what in (
        ("inter-token-latency", "inter-token-latency-std-dev", "inter token latency"),
        ("time-to-first-token", "time-to-first-token-std-dev", "time to first token"),
        ("kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev", "kv-cache transfer"),
    ):
        if c[mean] < 0:
            raise SimConfigError(f"{what} cannot be negative")
        if c[std] < 0:
            raise SimConfigError(f"{what} standard deviation cannot be negative")
        if _over_30(c[std], c[mean]):
            raise SimConfigError(f"{what} standard deviation cannot be more than 30% of {what}")
    for key in ("prefill-overhead", "prefill-time-per-token", "prefill-time-std-dev",
                "kv-cache-transfer-time-per-token", "kv-cache-transfer-time-std-dev"):  # fmt: skip
        if c[key] < 0:  # no upper bound on these two std-devs (config.go says why)
            raise SimConfigError(f"{key} cannot be negative")
    if c["time-factor-under-load"] < 1.0:
        raise SimConfigError("time factor under load cannot be less than 1.0")
    if c["max-num-seqs"] < 1:
        raise SimConfigError("max num seqs cannot be less than 1")
    if c["latency-calculator"] not in CALCULATORS:
        raise SimConfigError(f"unknown latency-calculator {c['latency-calculator']}")
    return c
