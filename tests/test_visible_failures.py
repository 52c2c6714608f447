"""A line a pack declares a failure (``failure: true``, e.g. a launcher's non-zero exit status) keeps a log that no
rule explains from reading as "no failure", and the report's next action names that line (file:line)."""

from __future__ import annotations

import json
from pathlib import Path

from mldebug_rules.cli import main


def diagnose_json(tmp_path: Path, text: str, capsys) -> dict:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text(text)
    assert main(["diagnose", "--offline", "--log", str(log), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_launcher_exit_status_is_a_visible_failure(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rep = diagnose_json(
        tmp_path,
        "step 100/5000 loss 2.3141\nstep 200/5000 loss 2.2908\n"
        "[ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] exits with return code = 1\n",
        capsys,
    )
    assert rep["verdict"] == "uncertain" and rep["hypotheses"] == []
    assert "A failure that no rule explains yet" in rep["next_action"]
    assert "exits with return code = 1" in rep["next_action"] and "train.log:3" in rep["next_action"]


def test_exit_status_zero_and_far_from_the_end_are_no_failure(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    ok = diagnose_json(tmp_path, "step 100/5000 loss 2.31\nProcess finished with exit code 0\n", capsys)
    assert ok["verdict"] == "no_failure"
    # A failed first attempt, then a long healthy run: the failure line is not the run's end.
    steps = "".join(f"step {i}/5000 loss {1.5 - i / 400:.4f}\n" for i in range(1, 400))
    later = diagnose_json(tmp_path, "srun: error: node-3: task 0: Exited with exit code 1\n" + steps, capsys)
    assert later["verdict"] == "no_failure"


def test_the_flag_is_data_a_pack_can_set(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A team pack declares its own runner's failure line; without the flag the same signature changes nothing."""
    pack = tmp_path / "runner"
    pack.mkdir()
    (pack / "pack.yaml").write_text(
        "pack: runner\nversion: 1.0.0\ndescription: our job runner\nrequires: mldebug-rules/rules/v1\n"
    )

    def write(flag: str) -> None:
        (pack / "runner.yaml").write_text(
            "signatures:\n"
            "  - id: runner_job_failed\n"
            "    title: Our job runner marked the job failed\n"
            "    role: cascade\n"
            "    regex: 'JOBRUNNER: job \\S+ state=FAILED'\n"
            f"{flag}"
            "    examples:\n"
            "      match: ['JOBRUNNER: job j-17 state=FAILED']\n"
        )

    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0\nJOBRUNNER: job j-17 state=FAILED\n")
    args = ["diagnose", "--offline", "--log", str(log), "--format", "json", "--rules", str(pack)]
    unread = "signature runner_job_failed: no rule reads it"
    write("    failure: true\n")
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "uncertain"
    main(["rules", "lint", str(pack)])  # the verdict reads a failure signature: lint must not call it unread
    assert unread not in "".join(capsys.readouterr())
    write("")
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "no_failure"
    main(["rules", "lint", str(pack)])
    assert unread in "".join(capsys.readouterr())
