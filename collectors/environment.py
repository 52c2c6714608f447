"""The environment a run depends on: versions, the variables that matter, limits, cgroup memory, scheduler.

Versions are read without importing torch here: importing it can take seconds or hang on a broken driver, so
its metadata is read from files, and only what needs the import runs in a subprocess with a deadline. Every
value passes through ``redact``; variables named like secrets are never recorded.

>>> sorted(interesting_env({"NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_x", "HOME": "/root", "SLURM_JOB_ID": "77",
...                         "NCCL_IB_HCA": "mlx5", "WANDB_API_KEY": "k", "OMP_NUM_THREADS": "8",
...                         "TORCH_HUB_TOKEN": "t", "NCCL_SSH_KEY": "k", "TOKENIZERS_PARALLELISM": "true"}).items())
[('NCCL_DEBUG', 'INFO'), ('NCCL_IB_HCA', 'mlx5'), ('OMP_NUM_THREADS', '8'), ('SLURM_JOB_ID', '77'), ('TOKENIZERS_PARALLELISM', 'true')]
>>> files = {"/sys/fs/cgroup/job/memory.max": "8589934592\\n",
...          "/sys/fs/cgroup/job/memory.events": "low 0\\nhigh 0\\nmax 12\\noom 3\\noom_kill 2\\n"}
>>> cgroup_memory("0::/job\\n", files.get)
{'cgroup_memory_limit': 8589934592.0, 'cgroup_oom_kills': 2.0}
>>> job = "/sys/fs/cgroup/memory/slurm/uid_1/job_9/"
>>> v1 = {job + "memory.limit_in_bytes": "9223372036854771712\\n",
...       job + "memory.oom_control": "oom_kill_disable 0\\nunder_oom 0\\noom_kill 1\\n"}
>>> cgroup_memory("4:memory:/slurm/uid_1/job_9\\n0::/\\n", v1.get)
{'cgroup_memory_limit': -1.0, 'cgroup_oom_kills': 1.0}
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import sys
from collections.abc import Callable, Mapping
from importlib import metadata, util
from pathlib import Path
from typing import Any

from ..engine.facts import Fact, FactError
from ..redact import clip, is_secret_name, redact
from .base import Context, ProbeOutput, run_command
from .deadlines import command_timeout, hostname

_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "PYTORCH_CUDA_ALLOC_CONF",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "HF_HOME",
        "HF_DATASETS_CACHE",
        "TRANSFORMERS_CACHE",
        "TORCH_HOME",
        "XDG_CACHE_HOME",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "KUBERNETES_SERVICE_HOST",
    }
)
_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "SLURM_", "ACCELERATE_", "DEEPSPEED_", "FI_", "UCX_")
_SLURM_KEEP = frozenset(
    {
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURM_NNODES",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_RESTART_COUNT",
        "SLURM_ARRAY_TASK_ID",
    }
)
# Named like a secret, but a setting: a tokenizer's fork-safety switch is evidence in a DataLoader hang.
_NOT_SECRET = frozenset({"TOKENIZERS_PARALLELISM"})
_UNLIMITED = 2**62  # cgroup v1 says "no limit" with a huge page-rounded number
_MAX_VALUE = 300


def interesting_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change how training behaves, secrets left out and values redacted."""
    out = {}
    for name, value in env.items():
        if is_secret_name(name) and name not in _NOT_SECRET:
            continue
        if name.startswith("SLURM_") and name not in _SLURM_KEEP:
            continue  # Slurm exports ~80 variables; these say which job and which task this is
        if name in _NAMES or name.startswith(_PREFIXES):
            out[name] = clip(value, _MAX_VALUE)
    return out


def scheduler_of(env: Mapping[str, str], k8s_secret_dir: bool) -> str:
    if any(k.startswith("SLURM_JOB_ID") for k in env):
        return "slurm"
    if "KUBERNETES_SERVICE_HOST" in env or k8s_secret_dir:
        return "kubernetes"
    if "PBS_JOBID" in env or "LSB_JOBID" in env:
        return "pbs" if "PBS_JOBID" in env else "lsf"
    return "none"


def cgroup_memory(proc_cgroup: str, read: Callable[[str], str | None]) -> dict[str, float]:
    """Memory limit (bytes, -1 when unlimited) and OOM kills recorded by the cgroup (v2 or v1)."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    out: dict[str, float] = {}
    if v1 is not None:
        base = "/sys/fs/cgroup/memory" + v1.rstrip("/")
        limit, events = read(base + "/memory.limit_in_bytes"), read(base + "/memory.oom_control")
    elif v2 is not None:
        base = "/sys/fs/cgroup" + v2.rstrip("/")
        limit, events = read(base + "/memory.max"), read(base + "/memory.events")
    else:
        return out
    if limit is not None:
        raw = limit.strip()
        out["cgroup_memory_limit"] = (
            -1.0
            if raw == "max" or (raw.isdigit() and int(raw) >= _UNLIMITED)
            else (float(raw) if raw.isdigit() else -1.0)
        )
    if events is not None:
        m = re.search(r"^oom_kill (\d+)", events, re.M)
        if m:
            out["cgroup_oom_kills"] = float(m.group(1))
    return out


def _read_small(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return None


def torch_versions_from_files() -> dict[str, str]:
    """torch and its CUDA version from ``torch/version.py``, without importing torch."""
    try:
        spec = util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    text = _read_small(str(Path(next(iter(spec.submodule_search_locations))) / "version.py")) or ""
    out = {}
    for key, name in (("__version__", "torch_version"), ("cuda", "torch_cuda"), ("hip", "torch_hip")):
        m = re.search(rf"^{key}\s*(?::\s*\S+\s*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            out[name] = m.group(1)
    if not out:
        out["torch_version"] = "present"
    return out


def nccl_version_from_metadata() -> str:
    for dist in ("nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl-cu13"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


_TORCH_QUERY = (
    "import json, torch\n"
    "d = {'torch_version': torch.__version__, 'torch_cuda': str(torch.version.cuda or '')}\n"
    "try:\n"
    "    d['nccl_version'] = '.'.join(map(str, torch.cuda.nccl.version()))\n"
    "except Exception:\n"
    "    pass\n"
    "print(json.dumps(d))\n"
)


def torch_versions_by_import(timeout_s: float) -> tuple[dict[str, str], str]:
    """Import torch in a child process with a deadline (the import can hang on a wedged driver)."""
    res = run_command([sys.executable, "-c", _TORCH_QUERY], timeout_s)
    if res.status != "ok":
        return {}, res.status
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}, "error"
    return {k: str(v) for k, v in data.items() if v}, "ok"


def env_facts(ctx: Context, env: Mapping[str, str], scope: str = "") -> list[Fact]:
    """env.setting facts for one environment: this tool's own ("") or a trainer's ("pid:N")."""
    facts: list[Fact] = []
    host = hostname()
    for name, value in sorted(interesting_env(env).items()):
        facts.append(_setting(ctx, name, value, scope, host))
    if scope.startswith("pid:"):
        cg = _read_small(f"/proc/{scope[4:]}/cgroup")
        if cg:
            for name, number in sorted(cgroup_memory(cg, _read_small).items()):
                facts.append(_setting(ctx, name, "", scope, host, number))
    return [f for f in facts if f is not None]


def _setting(ctx: Context, name: str, value: str, scope: str, host: str, number: float | None = None) -> Any:
    if number is None:
        try:
            number = float(value) if value and re.fullmatch(r"-?\d+(?:\.\d+)?", value) else -1.0
        except ValueError:
            number = -1.0
    try:
        return ctx.registry.make(
            "env.setting",
            {"name": name, "value": redact(value), "number": float(number), "scope": scope},
            probe="environment",
            host=host,
        )
    except FactError:
        return None


def probe_environment(ctx: Context) -> ProbeOutput:
    out = ProbeOutput("environment")
    host = hostname()
    settings: list[tuple[str, str, float | None]] = [("python_version", platform.python_version(), None)]
    versions = torch_versions_from_files()
    nccl = nccl_version_from_metadata()
    if nccl:
        versions["nccl_version"] = nccl
    notes: list[str] = []
    if versions and "nccl_version" not in versions and versions.get("torch_cuda"):
        imported, status = torch_versions_by_import(command_timeout())
        if status != "ok":
            notes.append(f"import torch: {status}")
        versions.update({k: v for k, v in imported.items() if k not in versions or k == "nccl_version"})
    settings += [(k, v, None) for k, v in sorted(versions.items())]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    settings.append(("ulimit_nofile", str(soft), float(soft) if soft >= 0 else -1.0))
    cg = _read_small("/proc/self/cgroup")
    if cg:
        settings += [(k, "", v) for k, v in sorted(cgroup_memory(cg, _read_small).items())]
    sched = scheduler_of(os.environ, os.path.isdir("/var/run/secrets/kubernetes.io"))
    settings.append(("scheduler", sched, None))
    for name, value, number in settings:
        f = _setting(ctx, name, value, "", host, number)
        if f is not None:
            out.facts.append(f)
    out.facts += env_facts(ctx, os.environ, "")
    out.detail = "; ".join([f"{len(out.facts)} setting(s)", *notes])
    return out
