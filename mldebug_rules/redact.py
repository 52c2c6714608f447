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
    r"(?i)(TOKEN|SECRET|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|[A-Z0-9]_KEY$"
    r"|(?:^|_)PASS(?:_|$)|(?:^|_)AUTH(?:_|$)|AUTHORIZATION|COOKIE)"
)
# Linear time on any input. A pattern of the form ``[A-Za-z0-9_]*TOKEN[A-Za-z0-9_]*=`` backtracks through
# every occurrence of TOKEN in a long word, at every start offset: quadratic (5 s for 10,000 characters).
# So the names are matched whole, as a maximal word that a lookbehind pins to its start, followed by its
# separator; whether the name is a secret's is decided in Python, and only then is the value looked for.
_ASSIGN = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z0-9_]+)=")
# A flag and its value (``--api-key X``, ``--hf_token=X``); a value given after a space must not itself look
# like a flag (``--use-key --lr 3``: the next flag is not a secret).
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9_-]+)(=|\s+(?!-))")
# ``"db_password": "x"``, ``password: hunter2``, ``aws_secret_access_key = X`` (JSON, YAML, INI, prose).
_PAIR = re.compile(r"(?<![A-Za-z0-9_-])([\"']?)([A-Za-z0-9_-]+)[\"']?\s*[:=]\s*")
# Quoted values are bounded, so that many unterminated quotes cannot make a scan per name.
_VALUE = re.compile(r"\"[^\"\n]{0,4096}\"|'[^'\n]{0,4096}'|[^\s\"']\S*")
_QUOTED = re.compile(r"\"[^\"\n]{0,4096}\"|'[^'\n]{0,4096}'")
_ENV_SECRET = re.compile(
    r"(?i)TOKEN|SECRET|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|[A-Z0-9]_KEY(?:_|$)"
    r"|_PASS$|_AUTH$"
)
_FLAG_SECRET = re.compile(r"(?i)token|secret|passw(?:or)?d|credential|key")
_JSON_SECRET = re.compile(r"(?i)token|secret|passw(?:or)?d|credential|api_?key|access_?key|private_?key")
# An unquoted ``name: value`` only when the name ends in a secret word: ``tokens: 4096`` stays readable.
_PROSE_SECRET = re.compile(
    r"(?i)(?:token|secret|passw(?:or)?d|passphrase|credentials?|api_?key|access_?key|private_?key"
    r"|(?:^|[_-])(?:pass|auth))$"
)
# Userinfo in a URL, including an empty user name (redis://:password@host); a scheme starts a word.
_URL_CRED = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^\s:/@]*):([^\s@/]+)@")
# A URL whose user name alone is a token (https://ghs_xxxx@github.com, https://<40 hex>@host).
_URL_TOKEN_USER = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)([A-Za-z0-9_-]{20,})@")
_TOKEN_SHAPES = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})\b"
)
# HTTP authorization headers, and a bare bearer token.
_AUTH_HEADER = re.compile(
    r"(?i)((?<![A-Za-z0-9_-])(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?"
    r"(?!\[REDACTED\])([^\s\"']+)"
)
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_-])(bearer\s+)(?!\[REDACTED\])([A-Za-z0-9._~+/=-]{8,})")
# ``wandb login <40 hex>``, ``huggingface-cli login <token>``: the key as a positional argument.
_LOGIN_ARG = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])((?:wandb|huggingface-cli|hf)\s+(?:auth\s+)?login(?:\s+--?[a-z][a-z-]*)*\s+)"
    r"([A-Za-z0-9_-]{20,})"
)


def _mask_after(text: str, name_re: re.Pattern[str], secret: Any, quoted_only: bool = False) -> str:
    """Mask the value after every ``name<separator>`` that `name_re` finds and `secret(match)` accepts."""
    out: list[str] = []
    pos = 0
    for m in name_re.finditer(text):
        if m.start() < pos or not secret(m):
            continue
        v = (_QUOTED if quoted_only else _VALUE).match(text, m.end())
        if v is None or text.startswith(MASK, m.end()) or text.startswith(MASK, m.end() + 1):
            continue
        value = v.group(0)
        quote = value[0] if value[0] in "\"'" and len(value) > 1 and value[-1] == value[0] else ""
        out += [text[pos : m.end()], f"{quote}{MASK}{quote}"]
        pos = v.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _env_secret(m: re.Match[str]) -> bool:
    name = m.group(1)
    # Upper-case names holding KEY (OPENAI_KEY2, SSH_KEY_FILE) are environment variables; "sort key=loss" is prose.
    return bool(_ENV_SECRET.search(name)) or (name.isupper() and "KEY" in name)


def _pair_secret(m: re.Match[str]) -> bool:
    name = m.group(2)
    return bool(_PROSE_SECRET.search(name)) or (bool(m.group(1)) and bool(_JSON_SECRET.search(name)))


def redact(text: str) -> str:
    if not text:
        return text
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2) + ' ' if m.group(2) else ''}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _mask_after(text, _ASSIGN, _env_secret)
    text = _mask_after(text, _FLAG, lambda m: bool(_FLAG_SECRET.search(m.group(1))))
    text = _URL_CRED.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    text = _URL_TOKEN_USER.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _mask_after(text, _PAIR, _pair_secret)
    # A quoted value under any name that mentions a secret (``{"hf_token_v2": "x"}``), not only at the end.
    text = _mask_after(text, _PAIR, lambda m: bool(_JSON_SECRET.search(m.group(2))), quoted_only=True)
    text = _LOGIN_ARG.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return _TOKEN_SHAPES.sub(MASK, text)


def clip(text: str, limit: int) -> str:
    """Redact, then cut to at most `limit` characters (plus an ellipsis).

    Redacting after a cut leaks whatever the cut disguised (a URL password whose ``@`` fell past the cut no
    longer looks like one), so the order is fixed here. And a cut inside a word drops that word's visible
    part, so a secret the patterns could only recognise whole never shows a prefix either.

    >>> clip("see https://u:hunter2@host/x now", 100)
    'see https://u:[REDACTED]@host/x now'
    >>> clip("clone https://u:hunter2@example.com/r", 22)
    'clone …'
    """
    text = redact(text)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if not text[limit].isspace():
        cut = cut[: max(cut.rfind(" "), cut.rfind("\t")) + 1]
    return cut + "…"


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
