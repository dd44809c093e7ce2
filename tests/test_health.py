"""Run health (pretrain/health.py, finetune/health.py) on synthetic histories: every state fires
when its definition holds and stays silent on the curves of healthy runs measured here."""
import logging
import math

import numpy as np
import pytest

from finetune import health as ft_health
from pretrain import health

RUN = health.RunFacts(num_train_steps=1000, num_warmup_steps=20)


def _eval(step, **overrides):
    """An eval of a healthy tiny run (the calibration run's step-60 figures)."""
    metrics = dict(global_step=step, loss=15.0, masked_lm_loss=8.0, masked_lm_accuracy=0.04,
                   sampled_masked_lm_accuracy=0.03, disc_loss=0.31, disc_auc=0.87,
                   disc_auc_real=0.85, disc_precision=0.48, disc_recall=0.2,
                   disc_replaced_rate=0.12, disc_positive_rate=0.05, repr_mean_cosine=0.5,
                   repr_min_dim_spread=0.3)
    metrics.update(overrides)
    return metrics


def _states(history, run=RUN):
    return health.assess(history, run)


def test_healthy_history_raises_nothing():
    history = [_eval(20, disc_positive_rate=0.0, disc_auc_real=0.75, sampled_masked_lm_accuracy=0),
               _eval(40), _eval(60), _eval(160, disc_auc_real=0.8, masked_lm_loss=7.0)]
    for i in range(1, len(history) + 1):
        assert _states(history[:i]) == []


def test_discriminator_stalled_needs_both_no_positives_and_chance_ranking():
    stalled = _eval(80, disc_positive_rate=0.0, disc_auc_real=0.55)
    assert _states([stalled]) == ["disc_stalled"]
    # A falling but still ranking discriminator is not stalled, nor one that still calls tokens
    # replaced, nor any run during warm-up.
    assert _states([_eval(80, disc_positive_rate=0.0, disc_auc_real=0.80)]) == []
    assert _states([_eval(80, disc_positive_rate=0.05, disc_auc_real=0.55)]) == []
    assert _states([_eval(20, disc_positive_rate=0.0, disc_auc_real=0.55)]) == []
    bert = health.RunFacts(1000, 20, has_discriminator=False)
    assert _states([_eval(80, disc_positive_rate=0.0, disc_auc_real=0.55)], bert) == []


def test_collapse_by_parallel_vectors_or_a_dead_dimension():
    assert _states([_eval(80, repr_mean_cosine=0.995)]) == ["collapse"]
    assert _states([_eval(80, repr_mean_cosine=0.94)]) == []  # the official run at step 40
    assert _states([_eval(80, repr_min_dim_spread=0.013)]) == ["collapse"]  # official, step 60
    assert _states([_eval(20, repr_mean_cosine=0.999)]) == []  # warm-up


def test_generator_balance():
    assert _states([_eval(300, sampled_masked_lm_accuracy=0.7, disc_replaced_rate=0.045)]) == \
        ["generator_too_strong"]
    # ln(30522) = 10.33: a generator whose loss is still 9.5 at step 300 learns nothing; the
    # healthy calibration run's was 7.9 at step 120 (and 10.06 at step 20, in warm-up).
    assert _states([_eval(300, masked_lm_loss=9.5)]) == ["generator_idle"]
    assert _states([_eval(100, masked_lm_loss=10.06)]) == []  # still early
    uniform = health.RunFacts(1000, 20, learned_generator=False)
    assert _states([_eval(300, masked_lm_loss=10.3)], uniform) == []


def test_loss_not_finite_and_loss_rising():
    assert _states([_eval(40, loss=math.nan)]) == ["loss_not_finite"]
    rising = [_eval(s, masked_lm_loss=v) for s, v in
              zip(range(20, 140, 20), (9.0, 8.0, 8.1, 8.5, 8.6, 8.7))]
    assert _states(rising) == ["loss_rising"]
    assert _states(rising[:-1]) == []  # two evals above the minimum are not enough
    noisy = [_eval(s, masked_lm_loss=v) for s, v in
             zip(range(20, 140, 20), (9.0, 8.0, 8.2, 7.9, 8.1, 8.0))]
    assert _states(noisy) == []


def test_monitor_logs_each_change_once_and_resumes_without_repeating(caplog):
    monitor = health.Monitor(RUN)
    with caplog.at_level(logging.INFO, logger=health.__name__):
        assert monitor.after_eval(40, _eval(40)) == {}
        stalled = dict(disc_positive_rate=0.0, disc_auc_real=0.55)
        assert monitor.after_eval(80, _eval(80, **stalled)) == {"disc_stalled": 80}
        assert monitor.after_eval(120, _eval(120, **stalled)) == {"disc_stalled": 80}
    began = [r for r in caplog.records if "disc_stalled since step 80" in r.getMessage()]
    assert len(began) == 1 and began[0].levelno == logging.WARNING
    assert "Try: adam_bias_correction true" in began[0].getMessage()
    # A resumed run reads the recorded evals: the state is still active, not announced again.
    recorded = [dict(_eval(120, **stalled), health={"disc_stalled": 80})]
    caplog.clear()
    resumed = health.Monitor(RUN, recorded)
    with caplog.at_level(logging.INFO, logger=health.__name__):
        assert resumed.after_eval(160, _eval(160, **stalled)) == {"disc_stalled": 80}
        assert resumed.after_eval(200, _eval(200)) == {}
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["health: disc_stalled cleared at step 200 (began at step 80)"]
    assert health.line({"collapse": 120, "disc_stalled": 80}) == \
        "disc_stalled since step 80, collapse since step 120"


def test_learning_rate_at_zero_before_the_last_step():
    monitor = health.Monitor(RUN)
    assert not monitor.after_steps(500, 1e-4)
    assert monitor.after_steps(500, 0.0) and monitor.active == {"lr_zero_early": 500}
    # It stays active through evals (they do not check it) and is part of their health entry.
    assert monitor.after_eval(520, _eval(520)) == {"lr_zero_early": 500}
    assert not health.Monitor(RUN).after_steps(1000, 0.0)  # the schedule's end
    # Reaching the end keeps an early zero reported; a positive rate clears it.
    assert not monitor.after_steps(1000, 0.0) and monitor.active == {"lr_zero_early": 500}
    assert monitor.after_steps(1000, 1e-5) and monitor.active == {}


def test_token_geometry():
    rs = np.random.RandomState(0)
    spread = rs.randn(200, 16)
    g = health.token_geometry(spread)
    assert abs(g["repr_mean_cosine"]) < 0.05 and g["repr_min_dim_spread"] > 0.5
    parallel = np.outer(rs.rand(200) + 1, rs.randn(16)) + 1e-4 * rs.randn(200, 16)
    assert health.token_geometry(parallel)["repr_mean_cosine"] > 0.999
    dead = spread.copy()
    dead[:, 3] = 0.7
    assert health.token_geometry(dead)["repr_min_dim_spread"] < 1e-12
    # The mean pairwise cosine, against the direct computation.
    units = spread / np.linalg.norm(spread, axis=1, keepdims=True)
    cos = units @ units.T
    expected = (cos.sum() - np.trace(cos)) / (200 * 199)
    np.testing.assert_allclose(g["repr_mean_cosine"], expected, atol=1e-12)


@pytest.mark.parametrize("check,args,expected", [
    (ft_health.classification_collapse, ([1, 1, 1],), "every dev prediction is class 1"),
    (ft_health.classification_collapse, ([1, 0, 1],), None),
    (ft_health.regression_collapse, ([2.5, 2.5, 2.5], [1.0, 3.0, 5.0]),
     "every dev prediction is about 2.5 (spread 0)"),
    (ft_health.regression_collapse, ([2.0, 2.5, 3.1], [1.0, 3.0, 5.0]), None),
    (ft_health.tagging_collapse, ([["O", "O"], ["O"]],), "every dev word is tagged O"),
    (ft_health.tagging_collapse, ([["O", "B-NP"], ["O"]],), None),
    (ft_health.qa_collapse, (["", " "],), "no dev question gets an answer"),
    (ft_health.qa_collapse, (["", "Paris"],), None),
])
def test_finetuning_collapse(check, args, expected):
    assert check(*args) == expected
