"""Tests for benchmarks/finetune_e2e.py's pure parts: the phases read from our log, the variants
of --our-hparams, the rows both sides read, the ratios."""
import datetime
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import finetune_e2e as e2e  # noqa: E402

LOG = """2026-11-26 23:13:15,124 INFO config: each trial's finetune_config.json (...)
2026-11-26 23:13:15,349 INFO sst train: 200 examples
2026-11-26 23:13:18,200 INFO trial 1: training 7 steps (1 epochs of 7 batches of 32; 200 examples), starting at step 0
2026-11-26 23:13:57,477 INFO trial 1 epoch 1/1 step 1/7, loss 0.9101, lr 2.571e-04
2026-11-26 23:14:34,400 INFO trial 1 epoch 1/1 step 7/7, loss 2.7636, lr 0.0000
2026-11-26 23:14:36,650 INFO sst dev: 872 examples
2026-11-26 23:16:59,793 INFO trial 1 sst dev: accuracy: 49.08 - loss: 3.56
"""


def _t(clock: str) -> float:
    return datetime.datetime.strptime(f"2026-11-26 {clock}", "%Y-%m-%d %H:%M:%S.%f").timestamp()


def test_phases_from_our_log():
    phases = e2e.log_phases(LOG, _t("23:13:07.000"), _t("23:17:04.253"), "sst")
    assert phases == {"startup_s": 8.12, "prepare_s": 3.08, "first_step_s": 39.28,
                      "other_steps_s": 36.92, "after_train_s": 2.25, "eval_s": 143.14,
                      "exit_s": 4.46}


def test_a_phase_whose_line_is_missing_is_none():
    log = "\n".join(line for line in LOG.splitlines() if "dev: 872" not in line)
    phases = e2e.log_phases(log, _t("23:13:07.000"), _t("23:17:04.253"), "sst")
    assert phases["after_train_s"] is None and phases["eval_s"] is None
    assert phases["first_step_s"] == 39.28


def test_our_hparams_variants():
    assert e2e.parse_variants(None) == [("default", {})]
    assert e2e.parse_variants(['full={"x": 1}', '{"y": 2}']) == [("full", {"x": 1}),
                                                                ("v2", {"y": 2})]
    for bad in (['{"x": '], ["[1]"], ['a={}', 'a={}']):
        with pytest.raises(ValueError):
            e2e.parse_variants(bad)


def test_the_first_rows_of_each_task(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.tsv").write_text("sentence\tlabel\na\t0\nb\t1\nc\t0\n")
    (src / "dev.tsv").write_text("sentence\tlabel\nd\t1\n")
    (src / "train.txt").write_text("w1 NN B-NP\n\nw2 NN B-NP\nw3 VB B-VP\n\nw4 NN B-NP\n\n")
    (src / "dev.txt").write_text("w5 NN B-NP\n\n")
    out = tmp_path / "out"
    out.mkdir()
    e2e.write_sst({"train": str(src / "train.tsv"), "dev": str(src / "dev.tsv")}, str(out), 2)
    assert (out / "train.tsv").read_text() == "sentence\tlabel\na\t0\nb\t1\n"
    e2e.write_chunk({"train": str(src / "train.txt"), "dev": str(src / "dev.txt")}, str(out), 2)
    assert (out / "train.txt").read_text() == "w1 NN B-NP\n\nw2 NN B-NP\nw3 VB B-VP\n\n"
    assert (out / "dev.txt").read_text() == "w5 NN B-NP\n\n"


def test_ratios_per_round_against_the_peer_and_the_first_variant():
    def run(impl, variant, r, wall):
        return {"task": "sst", "n_train": 2000, "dtype": "float32", "impl": impl,
                "variant": variant, "round": r, "wall_s": wall, "dev_score": 50.0,
                "mean_padded_len": 128.0, "phases": {"eval_s": 1.0}, "load_before": 1.0}
    runs = [run("ours-tf", "full", 1, 100.0), run("ours-tf", "bucketed", 1, 50.0),
            run("peer-hf-pytorch", "standard", 1, 80.0),
            run("ours-tf", "full", 2, 120.0), run("ours-tf", "bucketed", 2, 60.0),
            run("peer-hf-pytorch", "standard", 2, 90.0)]
    rows = {row["variant"]: row for row in e2e.summarize(runs, "full")}
    assert rows["bucketed"]["wall_s"] == 55.0
    assert rows["bucketed"]["x_peer"] == round(85.0 / 55.0, 3)
    assert rows["bucketed"]["x_peer_per_round"] == [1.6, 1.5]
    assert rows["bucketed"]["x_first"] == 2.0
    assert "x_first" not in rows["full"] and "x_peer" not in rows["standard"]
