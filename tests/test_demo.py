"""README's first command, reduced: demo.py end to end with a few steps, outputs checked."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


def test_demo_path_runs_and_writes_its_outputs(tmp_path):
    work = tmp_path / "demo"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "demo.py"), "--work-dir", str(work),
         "--pretrain-steps", "20", "--finetune-epochs", "0.2", "--vocab-size", "1000"],
        capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    # The corpus and the labelled task were derived from the standard library's documentation.
    assert len(os.listdir(work / "corpus")) == 4
    for split in ("train", "dev", "test"):
        assert (work / "finetuning_data" / "sst" / f"{split}.tsv").stat().st_size > 1000
    # Pre-training left a checkpoint, the configs and held-out eval figures.
    model_dir = work / "models" / "demo"
    assert (model_dir / "model.ckpt-20.index").exists()
    assert (model_dir / "spm.model").exists() and (model_dir / "bert_config.json").exists()
    eval_results = json.loads((model_dir / "results" / "unsup_results.json").read_text())
    assert 0.0 <= eval_results["disc_auc"] <= 1.0
    # The run's health line (pretrain/health.py), as its results record it.
    from pretrain import health
    assert f"health of the pre-training run: {health.line(eval_results['health'])}" in out
    # The scorer printed a p(replaced) for every token of the hand-edited sentence.
    assert "p(replaced)" in out and "▁string" in out
    # Both fine-tuning runs wrote results, and the summary printed both accuracies.
    for name in ("sst_results.json", "sst_scratch_results.json"):
        assert (model_dir / "results" / name).exists()
    # The frozen-feature probe ran on the pre-trained encoder and on 3 random ones.
    probes = json.loads((model_dir / "results" / "probe_results.json").read_text())
    assert len(probes["random_seeds"]) == 3 and set(probes["pretrained"]) == {"sst/last", "sst/mean"}
    # The summary shows the probe and the fine-tuned accuracy of both initialisations.
    summary = out[out.index("== scores"):].splitlines()
    assert summary[1].split() == ["linear", "probe", "fine-tuned"]
    for line, label, column in ((summary[2], ["pre-trained", "ELECTRA"], "pretrained"),
                                (summary[3], ["random", "initialisation"], "random")):
        fields = line.split()
        assert fields[:2] == label
        assert float(fields[2]) == pytest.approx(100 * probes[column]["sst/mean"], abs=0.051)
        assert 0.0 <= float(fields[3]) <= 100.0


def test_a_step_runs_as_its_commands_main_and_a_stop_says_how_to_continue(monkeypatch, capsys):
    """demo._run: the command's main gets the printed arguments (and sees them as sys.argv);
    a failed step stops the demo with its status, a step stopped by a signal (exit 75) with how
    to continue."""
    import types

    import demo
    from util import preemption

    calls, statuses = [], iter([0, 2, preemption.EXIT_PREEMPTED])

    def main(argv):
        calls.append((argv, list(sys.argv)))
        return next(statuses)

    monkeypatch.setattr(demo.importlib, "import_module",
                        lambda name: types.SimpleNamespace(main=main) if name == "tools.probe"
                        else None)
    argv_before = list(sys.argv)
    demo._run("5/6 probe", ["tools/probe.py", "--model-dir", "m"])
    assert calls == [(["--model-dir", "m"], ["tools/probe.py", "--model-dir", "m"])]
    assert "== 5/6 probe\n$ python tools/probe.py --model-dir m" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="step '5/6 probe' failed: the command exited with "
                                         "status 2"):
        demo._run("5/6 probe", ["tools/probe.py", "--model-dir", "m"])
    with pytest.raises(SystemExit, match="stopped by a signal during step '5/6 probe', its state "
                                         "saved; run the same demo command again to continue"):
        demo._run("5/6 probe", ["tools/probe.py", "--model-dir", "m"], verbose=True)
    assert calls[-1][0] == ["--model-dir", "m", "--verbose"]
    assert sys.argv == argv_before
