"""The traceback parser: every format users paste, chains, origins, errno, frames and packages; and the scanner's
context lines that feed it (a traceback region is read in the same pass as the signatures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mldebug_rules.collectors.logscan import Pattern, Scanner
from mldebug_rules.collectors.tracebacks import ParsedException, bare_exceptions, normalise_path, parse_lines
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules.diagnose import Request, diagnose

samples: dict[str, str] = {}
samples["worker"] = """step 3 loss 2.0
Traceback (most recent call last):
  File "/home/u/proj/train.py", line 88, in <module>
    for batch in loader:
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 633, in __next__
    data = self._next_data()
  File "/opt/conda/lib/python3.10/site-packages/torch/_utils.py", line 644, in reraise
    raise exception
PIL.UnidentifiedImageError: Caught UnidentifiedImageError in DataLoader worker process 3.
Original Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
    data = fetcher.fetch(index)
  File "/home/u/proj/data.py", line 41, in __getitem__
    img = Image.open(path)
  File "/opt/conda/lib/python3.10/site-packages/PIL/Image.py", line 3283, in open
    raise UnidentifiedImageError(msg)
PIL.UnidentifiedImageError: cannot identify image file '/data/x.jpg'
"""
samples["context"] = """Traceback (most recent call last):
  File "/usr/lib/python3.11/zipfile.py", line 1300, in _RealGetContents
    raise BadZipFile("File is not a zip file")
zipfile.BadZipFile: File is not a zip file

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 12, in <module>
    sd = torch.load("ckpt.pt")
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1025, in load
    raise pickle.UnpicklingError(msg)
_pickle.UnpicklingError: invalid load key, '<'.
"""
samples["jupyter"] = """---------------------------------------------------------------------------
OutOfMemoryError                          Traceback (most recent call last)
Cell In[3], line 5
      3 model = Net().cuda()
      4 x = torch.randn(4096, 4096, 64, device="cuda")
----> 5 y = model(x)

File ~/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self, *args, **kwargs)
   1496 # If we don't have any hooks
-> 1501     return forward_call(*args, **kwargs)

OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB (GPU 0; 15.78 GiB total capacity)
"""
samples["oldipy"] = """ZeroDivisionError                         Traceback (most recent call last)
<ipython-input-7-5b1c0a3f> in <module>()
      2 n = 0
----> 3 loss = total / n

ZeroDivisionError: division by zero
"""
samples["rich"] = """╭───────────────────── Traceback (most recent call last) ──────────────────────╮
│ C:\\Users\\me\\proj\\train.py:40 in <module>                                     │
│                                                                              │
│ ❱ 40 │   main()                                                              │
│                                                                              │
│ C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\site-packages\\torch\\serialization.py:1025 in │
│ load                                                                         │
╰──────────────────────────────────────────────────────────────────────────────╯
RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
"""
samples["ranks"] = """[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File "/w/train.py", line 10, in <module>
[rank1]:   File "/w/train.py", line 10, in <module>
[rank0]:     loss = crit(out, y)
[rank1]:     torch.save(sd, p)
[rank0]:   File "/w/losses.py", line 22, in dice_loss
[rank1]:   File "/opt/py/lib/python3.10/site-packages/torch/serialization.py", line 619, in save
[rank0]:     return 1 - inter / union
[rank1]:     with _open_zipfile_writer(f) as opened_zipfile:
[rank0]: ZeroDivisionError: float division by zero
[rank1]: RuntimeError: [enforce fail at inline_container.cc:588] . unexpected pos 1234 vs 1000
[rank1]: OSError: [Errno 28] No space left on device
"""
samples["spawn"] = """Traceback (most recent call last):
  File "main.py", line 50, in <module>
    mp.spawn(run, nprocs=2)
  File "/opt/conda/lib/python3.8/site-packages/torch/multiprocessing/spawn.py", line 150, in join
    raise ProcessRaisedException(msg, error_index, failed_process.pid)
torch.multiprocessing.spawn.ProcessRaisedException: \x20

-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/opt/conda/lib/python3.8/site-packages/torch/multiprocessing/spawn.py", line 59, in _wrap
    fn(i, *args)
  File "/w/main.py", line 30, in run
    x = x.to(rank)
RuntimeError: CUDA error: invalid device ordinal
"""
samples["elastic"] = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \x20
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-01_10:00:00
  host      : node1
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 4242)
  error_file: /tmp/torchelastic_x/error.json
  traceback : Traceback (most recent call last):
    File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
      return f(*args, **kwargs)
    File "/w/train.py", line 77, in main
      batch = next(it)
  KeyError: 'label'
============================================================
"""
samples["py27"] = """Traceback (most recent call last):
  File "train.py", line 5, in <module>
    f.write(buf)
IOError: [Errno 28] No space left on device
"""
samples[
    "loguru"
] = """2024-01-01 12:00:00.000 | ERROR    | __main__:main:20 - An error has been caught in function 'main', process 'MainProcess' (1234), thread 'MainThread' (5678):
Traceback (most recent call last):

  File "/home/u/train.py", line 30, in <module>
    main()
    └ <function main at 0x7f>

> File "/home/u/train.py", line 20, in main
    loss = 1 / n
               └ 0

ZeroDivisionError: division by zero
"""
samples["thread"] = """Exception in thread Thread-3 (prefetch):
Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
    self.run()
  File "/w/prefetch.py", line 9, in run
    json.loads(line)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
"""


def _parse(name: str) -> list[ParsedException]:
    return parse_lines(list(enumerate(samples[name].splitlines(), 1)))


def test_worker_chain_has_root_in_worker_and_raising_package() -> None:
    surfaced, root = _parse("worker")
    assert (surfaced.position, root.position) == ("surfaced", "root")
    assert root.origin == "worker" and root.worker == 3 and root.link == "worker"
    assert root.qual_type == "PIL.UnidentifiedImageError" and root.bare_type == "UnidentifiedImageError"
    assert root.innermost is not None and root.innermost.package == "PIL"
    assert root.user_frame is not None and (root.user_frame.module, root.user_frame.function) == (
        "/home/u/proj/data.py",
        "__getitem__",
    )
    assert surfaced.innermost is not None and surfaced.innermost.module == "torch/_utils.py"


def test_context_chain_root_first() -> None:
    root, surfaced = _parse("context")
    assert (root.bare_type, root.family, root.position) == ("BadZipFile", "ValueError", "root")
    assert (surfaced.bare_type, surfaced.position) == ("UnpicklingError", "surfaced")
    assert surfaced.innermost is not None and surfaced.innermost.module == "torch/serialization.py"


@pytest.mark.parametrize(
    ("name", "bare", "packages"),
    [
        ("jupyter", "OutOfMemoryError", ["user", "torch"]),
        ("oldipy", "ZeroDivisionError", ["user"]),
        ("rich", "RuntimeError", ["user", "torch"]),
        ("py27", "IOError", ["user"]),
        ("loguru", "ZeroDivisionError", ["user", "user"]),
        ("thread", "JSONDecodeError", ["stdlib", "user"]),
    ],
)
def test_formats(name: str, bare: str, packages: list[str]) -> None:
    (e,) = _parse(name)
    assert e.bare_type == bare
    assert [f.package for f in e.frames] == packages


def test_jupyter_and_windows_frames() -> None:
    (e,) = _parse("jupyter")
    assert e.frames[0].module == "Cell In[3]" and e.frames[0].lineno == 5
    assert e.frames[1].function == "Module._call_impl" and e.frames[1].lineno == 1501
    (r,) = _parse("rich")
    assert r.frames[0].module == "C:/Users/me/proj/train.py"
    assert (r.frames[1].module, r.frames[1].function) == ("torch/serialization.py", "load")


def test_interleaved_ranks_come_apart() -> None:
    a, b = _parse("ranks")
    assert (a.rank, a.bare_type, a.innermost and a.innermost.function) == (
        0,
        "ZeroDivisionError",
        "dice_loss",
    )
    assert (b.rank, b.bare_type) == (1, "RuntimeError")
    assert b.innermost is not None and b.innermost.module == "torch/serialization.py"


def test_spawned_process_and_elastic_root_cause() -> None:
    surfaced, root = _parse("spawn")
    assert surfaced.bare_type == "ProcessRaisedException" and surfaced.position == "surfaced"
    assert (root.origin, root.rank, root.position) == ("process", 1, "root")
    (k,) = _parse("elastic")
    assert (k.bare_type, k.family, k.origin, k.rank) == ("KeyError", "LookupError", "process", 3)
    assert k.user_frame is not None and k.user_frame.function == "main"


def test_errno_and_strerror() -> None:
    (e,) = _parse("py27")
    assert (e.errno, e.errno_name, e.family) == (28, "ENOSPC", "OSError")
    (w,) = parse_lines(
        [(1, "Traceback (most recent call last):"), (2, "OSError: [Errno 122] Disk quota exceeded")]
    )
    assert w.errno_name == "EDQUOT"
    (s,) = parse_lines(
        [(1, "Traceback (most recent call last):"), (2, "RuntimeError: write failed: Stale file handle")]
    )
    assert (s.errno, s.errno_name) == (-1, "ESTALE")


def test_bare_exception_lines() -> None:
    lines = [
        (1, "step 1"),
        (2, "KeyError: 'label'"),
        (3, "[rank0]: torch.OutOfMemoryError: CUDA out of memory."),
        (4, "Error: nope"),
        (5, "INFO: all good"),
        (6, "see ValueError: in the docs"),
    ]
    out = bare_exceptions(lines)
    assert [(e.bare_type, e.rank, e.in_traceback) for e in out] == [
        ("KeyError", None, False),
        ("OutOfMemoryError", 0, False),
    ]


def test_paths_normalise() -> None:
    assert normalise_path("/opt/conda/lib/python3.10/site-packages/pytorch_lightning/trainer/trainer.py") == (
        "pytorch_lightning/trainer/trainer.py",
        "lightning",
    )
    assert normalise_path("C:\\Python311\\Lib\\multiprocessing\\process.py") == (
        "multiprocessing/process.py",
        "stdlib",
    )
    assert normalise_path("/usr/lib/python3.11/zipfile.py") == ("zipfile.py", "stdlib")
    assert normalise_path("/home/me/proj/losses.py") == ("/home/me/proj/losses.py", "user")


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_scanner_keeps_lines_after_a_hit_across_chunks(chunk: int) -> None:
    sc = Scanner(
        [Pattern("tb", r"Traceback \(most recent call last\)", after=3)], tail_lines=0, chunk_size=chunk
    )
    data = (
        b'a\r\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\nValueError: x\nz\n'
    )
    (h,) = sc.scan_bytes(data).hits
    assert h.line_no == 2 and h.after == ('  File "x.py", line 1, in f', "    g()", "ValueError: x")


def test_exception_facts_in_a_diagnosis(tmp_path: Path, kb: KnowledgeBase) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.0\n" * 500 + samples["worker"] + "step 2 loss 1.0\n" * 400)
    d = diagnose(Request(run_dirs=[run], offline=True), kb=kb)
    excs = [f for f in d.facts if f.kind == "exception"]
    root = next(f for f in excs if f.attrs["position"] == "root")
    assert root.attrs["origin"] == "worker" and root.attrs["package"] == "PIL"
    assert root.attrs["surfaced_type"] == "UnidentifiedImageError" and root.line == 500 + 17
    frames = [f for f in d.facts if f.kind == "exception.frame" and f.attrs["chain"] == root.attrs["chain"]]
    assert {(f.attrs["package"], f.attrs["function"]) for f in frames if f.attrs["index"] == 0} == {
        ("torch", "reraise"),
        ("PIL", "open"),
    }


def test_logger_prefix_on_every_line_and_plain_exception() -> None:
    lines = [
        "ERROR 06-03 10:20:03 worker_base.py:145] Traceback (most recent call last):",
        'ERROR 06-03 10:20:03 worker_base.py:145]   File "/usr/lib/python3/dist-packages/vllm/worker/model_runner.py", line 749, in run',
        "ERROR 06-03 10:20:04 worker_base.py:145]     out = model(x)",
        "ERROR 06-03 10:20:04 worker_base.py:145] RuntimeError: CUDA error: an illegal memory access was encountered",
        "stderr: Traceback (most recent call last):",
        'stderr:   File "x.py", line 2, in f',
        "stderr: subprocess.CalledProcessError: Command 'x' returned non-zero exit status 1.",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "Exception: loss exploded",
    ]
    got = [
        (e.qual_type, e.frames[0].package if e.frames else "") for e in parse_lines(list(enumerate(lines, 1)))
    ]
    assert got == [
        ("RuntimeError", "vllm"),
        ("subprocess.CalledProcessError", "user"),
        ("Exception", "user"),
    ]


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("PermissionError: [WinError 5] Access is denied: 'C:\\\\runs\\\\ckpt.pt'", "EACCES"),
        ("PermissionError: [WinError 32] Der Prozess kann nicht auf die Datei zugreifen", "EACCES"),
        ("OSError: [WinError 112] There is not enough space on the disk", "ENOSPC"),
        ("OSError: [WinError 1455] The paging file is too small for this operation to complete", "ENOMEM"),
        (
            "FileExistsError: [WinError 183] Cannot create a file when that file already exists: 'out'",
            "EEXIST",
        ),
        ("OSError: [WinError 99999] Something new", ""),
    ],
)
def test_windows_error_codes_name_their_errno(line: str, name: str) -> None:
    """Windows messages are localised: the code names the error, so errno rules see Windows failures too."""
    (e,) = parse_lines([(1, "Traceback (most recent call last):"), (2, line)])
    assert e.errno_name == name
