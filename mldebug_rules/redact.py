"""Secret redaction for every report and bundle.

>>> redact("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx python train.py --api-key sk-123456 --lr 0.1")
'HF_TOKEN=[REDACTED] python train.py --api-key [REDACTED] --lr 0.1'
>>> redact("git clone https://alice:s3cr3t@example.com/repo --password=hunter2")
'git clone https://alice:[REDACTED]@example.com/repo --password=[REDACTED]'
>>> redact("python t.py --wandb-key=k3y --key s3cret --use-key --lr 3e-4 redis://:pw@cache:6379/0")
'python t.py --wandb-key=[REDACTED] --key [REDACTED] --use-key --lr 3e-4 redis://:[REDACTED]@cache:6379/0'
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
# A flag whose name mentions a secret (--api-key, --hf_token, --wandb-key, --key); a value given after a space
# must not itself look like a flag (``--use-key --lr 3``: the next flag is not a secret).
_FLAG = re.compile(
    r"(?i)(?<![\w-])(--?[a-z0-9_-]*(?:token|secret|passw(?:or)?d|credential|key)[a-z0-9_-]*)(=|\s+(?!-))(\"[^\"]*\"|'[^']*'|\S+)"
)
# Userinfo in a URL, including an empty user name (redis://:password@host).
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*):([^\s@/]+)@")
# Environment-style assignments of a variable named like *KEY* (OPENAI_KEY2=..., SSH_KEY_FILE=...): upper case
# only, so that prose such as "sort key=loss" stays readable.
_ENV_KEY_ASSIGN = re.compile(r"\b([A-Z0-9_]*KEY[A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")
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
    text = _ENV_KEY_ASSIGN.sub(lambda m: f"{m.group(1)}={MASK}", text)
    text = _FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _URL_CRED.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    text = _JSON_PAIR.sub(lambda m: f'{m.group(1)}"{MASK}"', text)
    return _TOKEN_SHAPES.sub(MASK, text)


def is_secret_name(name: str) -> bool:
    """Names like *TOKEN*, *SECRET*, *PASSWORD*, *CREDENTIAL*, *API_KEY*; and any environment-style (upper
    case) name containing KEY. Lower-case keys such as a fact's ``key`` are not secrets.

    >>> [n for n in ("HF_TOKEN", "OPENAI_KEY2", "SSH_KEY_FILE", "KEY", "key", "NCCL_DEBUG") if is_secret_name(n)]
    ['HF_TOKEN', 'OPENAI_KEY2', 'SSH_KEY_FILE', 'KEY']
    """
    return bool(_SECRET_NAME.search(name)) or (name.isupper() and "KEY" in name)


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
