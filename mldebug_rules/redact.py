"""Secret redaction for every report and bundle.

>>> redact("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx python train.py --api-key sk-123456 --lr 0.1")
'HF_TOKEN=[REDACTED] python train.py --api-key [REDACTED] --lr 0.1'
>>> redact("git clone https://alice:s3cr3t@example.com/repo --password=hunter2")
'git clone https://alice:[REDACTED]@example.com/repo --password=[REDACTED]'
>>> redact_env({"WANDB_API_KEY": "abc", "CUDA_VISIBLE_DEVICES": "0"})
{'WANDB_API_KEY': '[REDACTED]', 'CUDA_VISIBLE_DEVICES': '0'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "[REDACTED]"
_SECRET_NAME = re.compile(
    r"(?i)(TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|[A-Z0-9]_KEY$)"
)
_ENV_ASSIGN = re.compile(
    r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|[A-Z0-9]_KEY\b)[A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)"
)
_FLAG = re.compile(
    r"(?i)(--?[a-z0-9_-]*(?:token|secret|passw(?:or)?d|credential|api[_-]?key|access[_-]?key|private[_-]?key)[a-z0-9_-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)"
)
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):([^\s@/]+)@")
_TOKEN_SHAPES = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})\b"
)
_JSON_PAIR = re.compile(
    r"(?i)([\"']?[A-Za-z0-9_]*(?:token|secret|passw(?:or)?d|credential|api_?key|access_?key|private_?key)[A-Za-z0-9_]*[\"']?\s*:\s*)(\"[^\"]*\"|'[^']*')"
)


def redact(text: str) -> str:
    if not text:
        return text
    text = _ENV_ASSIGN.sub(lambda m: f"{m.group(1)}={MASK}", text)
    text = _FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _URL_CRED.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    text = _JSON_PAIR.sub(lambda m: f'{m.group(1)}"{MASK}"', text)
    return _TOKEN_SHAPES.sub(MASK, text)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else redact(v)) for k, v in env.items()}


def redact_obj(obj: Any) -> Any:
    """Redact every string in a JSON-like structure (keys that name secrets lose their values)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {
            k: (MASK if isinstance(v, str) and isinstance(k, str) and is_secret_name(k) else redact_obj(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_obj(x) for x in obj]
    if isinstance(obj, tuple):
        return [redact_obj(x) for x in obj]
    return obj
