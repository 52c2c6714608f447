"""Files whose names say little: CSV roles from the header, PBS/Grid Engine job output by its suffix."""

from __future__ import annotations

import math
from pathlib import Path

from mldebug_rules.collectors.metrics_parse import read_csv
from mldebug_rules.collectors.rundir import find_run_files

ULTRALYTICS = (
    "               epoch,      train/box_loss,      train/obj_loss,      train/cls_loss,   metrics/mAP_0.5,"
    "        val/box_loss,        val/obj_loss,        val/cls_loss,               x/lr0\n"
    "                   0,             0.10843,            0.043296,            0.032891,          0.045123,"
    "            0.089812,            0.039123,            0.029812,              0.0702\n"
    "                   1,                 nan,                 nan,                 nan,                 0,"
    "                 nan,                 nan,                 nan,              0.0402\n"
)


def test_csv_roles_come_from_the_header(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text(ULTRALYTICS)
    (tmp_path / "history.csv").write_text("epoch,accuracy,loss,val_accuracy,val_loss\n0,0.5,1.2,0.4,1.3\n")
    (tmp_path / "smi_log.csv").write_text("timestamp, utilization.gpu [%], memory.used [MiB]\n")
    (tmp_path / "labels.csv").write_text("path,label\na.jpg,3\n")  # data, not a log
    (tmp_path / "losses_by_class.csv").write_text("class,loss\ncat,0.3\n")  # no counter column
    files = find_run_files(tmp_path)
    assert sorted(p.name for p in files.files("metrics")) == ["history.csv", "results.csv"]
    assert [p.name for p in files.files("gpu")] == ["smi_log.csv"]


def test_a_table_of_loss_parts_gets_its_total(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    path.write_text(ULTRALYTICS)
    ss = read_csv(path, "results.csv")
    assert ss.series["loss"].values[0] == sum([0.10843, 0.043296, 0.032891])
    assert ss.series["val_loss"].values[0] == sum([0.089812, 0.039123, 0.029812])
    assert math.isnan(ss.series["loss"].values[1]) and math.isnan(ss.series["val_loss"].values[1])
    # a table that logs its total keeps it as it is
    (tmp_path / "m.csv").write_text("step,loss,loss_ce,loss_bbox\n1,2.0,1.5,0.4\n")
    assert read_csv(tmp_path / "m.csv", "m.csv").series["loss"].values == [2.0]


def test_pbs_and_grid_engine_job_output_is_scheduler_output() -> None:
    from mldebug_rules.collectors.rundir import classify

    for name in ("train.o12345", "job.e991", "array.o55-3", "array.o12345.2"):
        assert classify(name) == "scheduler", name
    for name in ("model.onnx", "foo.o", "a.e5x"):
        assert classify(name) is None, name
