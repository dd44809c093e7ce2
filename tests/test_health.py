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


# Healthy real-text runs recorded by benchmarks/health_grace.py (tests/test_health_runs.py's
# recipe, an eval every 5 steps): (warm-up, step, real-token AUC, share called replaced), all
# with 14.8% replaced. At 5 steps after warm-up each still calls nothing replaced at chance.
HEALTHY_EARLY = [(5, 5, 0.545, 0.0003), (5, 10, 0.628, 0.0), (5, 15, 0.762, 0.0),
                 (5, 20, 0.818, 0.1065), (5, 25, 0.840, 0.0582),
                 (0, 5, 0.648, 0.0), (0, 10, 0.736, 0.0015), (0, 20, 0.834, 0.0871),
                 (20, 20, 0.732, 0.0003), (20, 25, 0.815, 0.0174), (20, 40, 0.837, 0.0734)]


def test_a_discriminator_is_judged_only_after_a_grace_past_warm_up():
    early = [(warmup, step) for warmup, step, auc, called in HEALTHY_EARLY
             if auc < health.STALL_AUC and called < 0.1 * 0.148]
    assert early == [(5, 5), (5, 10), (0, 5)]  # the false alarms without a grace
    for warmup, step, auc, called in HEALTHY_EARLY:
        run = health.RunFacts(160, warmup)
        entry = _eval(step, disc_auc_real=auc, disc_positive_rate=called,
                      disc_replaced_rate=0.148)
        assert _states([entry], run) == [], (warmup, step)
    # The same figures past the grace are a stall, in either direction.
    run = health.RunFacts(160, 5)
    assert health.DISC_GRACE_STEPS == 20
    assert _states([_eval(24, disc_auc_real=0.628, disc_positive_rate=0.0)], run) == []
    assert _states([_eval(25, disc_auc_real=0.628, disc_positive_rate=0.0)], run) == \
        ["disc_stalled"]
    assert _states([_eval(25, disc_auc_real=0.628, disc_positive_rate=1.0)], run) == \
        ["disc_all_replaced"]


def test_a_discriminator_that_calls_every_token_replaced():
    # The toy electra_15 run of tests/test_health_runs.py: every token called replaced where
    # 13.7% were, real-token AUC 0.52.
    constant = dict(disc_positive_rate=1.0, disc_replaced_rate=0.137, disc_auc_real=0.52)
    assert _states([_eval(80, **constant)]) == ["disc_all_replaced"]
    # Calling more than the base rate replaced while ranking well is not the state, nor is
    # calling most replaced where most are, nor any answer while the ranking is good.
    assert _states([_eval(80, disc_positive_rate=0.6, disc_auc_real=0.55)]) == []
    assert _states([_eval(80, disc_positive_rate=0.95, disc_replaced_rate=0.7,
                          disc_auc_real=0.6)]) == []
    assert _states([_eval(80, **dict(constant, disc_auc_real=0.9))]) == []
    bert = health.RunFacts(1000, 20, has_discriminator=False)
    assert _states([_eval(80, **constant)], bert) == []


# Runs (their settings) and settings they do not have, which their advice must not name.
NO_GENERATOR_KNOBS = ("temperature", "generator_hidden_size")
ABSENT = [({"uniform_generator": True}, NO_GENERATOR_KNOBS),
          ({"unigram_generator": True}, NO_GENERATOR_KNOBS),
          ({"unigram_generator": True, "electra_15": True}, NO_GENERATOR_KNOBS),
          ({"freeze_generator": True}, ("generator_hidden_size",)),
          ({"electra_objective": False}, NO_GENERATOR_KNOBS + ("uniform_generator", "electra_15"))]


@pytest.mark.parametrize("settings,absent", ABSENT)
def test_advice_names_only_settings_the_run_has(settings, absent):
    run = health.RunFacts.from_settings(dict(settings, num_train_steps=1000, num_warmup_steps=20))
    # The states such a run can reach (the others' checks read settings it lacks: tested above).
    unreachable = {"disc_stalled", "disc_all_replaced", "generator_too_strong"} \
        if not run.has_discriminator else \
        {"generator_too_strong", "generator_idle"} if not run.learned_generator else set()
    for name in set(health.BY_NAME) - unreachable:
        message = health.describe(name, 40, run)
        assert not [word for word in absent if word in message], (name, message)


def test_advice_follows_the_runs_config():
    settings = {"num_train_steps": 1000, "num_warmup_steps": 20}
    learned = health.RunFacts.from_settings(settings)
    assert learned == health.RunFacts(1000, 20)
    assert "temperature 2.0" in health.describe("disc_stalled", 40, learned)
    assert health.describe("disc_stalled", 40) == health.describe("disc_stalled", 40, learned)
    uniform = health.RunFacts.from_settings(dict(settings, uniform_generator=True))
    assert uniform.generator == health.RANDOM and not uniform.learned_generator
    assert "a lower learning_rate (uniform and unigram samples" in \
        health.describe("disc_stalled", 40, uniform)
    bert = health.RunFacts.from_settings(dict(settings, electra_objective=False))
    assert not bert.has_discriminator
    assert "the masked LM's held-out loss" in health.describe("generator_idle", 120, bert)
    frozen = health.RunFacts.from_settings(dict(settings, freeze_generator=True))
    assert "tools/two_stage_init.py" in health.describe("generator_idle", 120, frozen)
    electric = health.RunFacts.from_settings(dict(settings, electra_objective=False,
                                                  electric_objective=True))
    assert electric.has_discriminator and electric.generator == health.LEARNED
    e15 = health.RunFacts.from_settings(dict(settings, electra_15=True))
    assert "electra_15 false" in health.describe("disc_all_replaced", 40, e15)
    assert "electra_15 false" not in health.describe("disc_all_replaced", 40, learned)


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
    uniform = health.RunFacts(1000, 20, generator=health.RANDOM)
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
    (ft_health.classification_collapse, ([1, 1, 1], [0, 1, 1]), "every dev prediction is class 1"),
    (ft_health.classification_collapse, ([0, 0, 0], [0, 1, 1], ["negative", "positive"]),
     "every dev prediction is 'negative'"),
    (ft_health.classification_collapse, ([1, 0, 1], [0, 1, 1]), None),
    # A dev set of one gold class, predicted right: not a collapse; predicted wrong: one.
    (ft_health.classification_collapse, ([1, 1, 1], [1, 1, 1], ["negative", "positive"]), None),
    (ft_health.classification_collapse, ([0, 0, 0], [1, 1, 1], ["negative", "positive"]),
     "every dev prediction is 'negative'"),
    (ft_health.regression_collapse, ([2.5, 2.5, 2.5], [1.0, 3.0, 5.0]),
     "every dev prediction is about 2.5 (spread 0)"),
    (ft_health.regression_collapse, ([2.0, 2.5, 3.1], [1.0, 3.0, 5.0]), None),
    (ft_health.regression_collapse, ([4.0, 4.0], [4.0, 4.0]), None),
    (ft_health.regression_collapse, ([2.0, 2.0], [4.0, 4.0]),
     "every dev prediction is 2 (every gold value is 4)"),
    (ft_health.tagging_collapse, ([["O", "O"], ["O"]], [["O", "B-NP"], ["O"]]),
     "every dev word is tagged 'O'"),
    (ft_health.tagging_collapse, ([["O", "B-NP"], ["O"]], [["O", "B-NP"], ["O"]]), None),
    (ft_health.tagging_collapse, ([["O", "O"], ["O"]], [["O", "O"], ["O"]]), None),
    (ft_health.qa_collapse, (["", " "],), "no dev question gets an answer"),
    (ft_health.qa_collapse, (["", "Paris"],), None),
    (ft_health.qa_collapse, (["", ""], [False, True]), "no dev question gets an answer"),
    (ft_health.qa_collapse, (["", ""], [False, False]), None),  # none answerable: right
])
def test_finetuning_collapse(check, args, expected):
    assert check(*args) == expected


def test_classification_scorers_name_labels_and_spare_a_one_class_dev_set_predicted_right():
    from finetune.classification import classification_metrics as cm
    labels = ["negative", "positive"]
    for scorer in (cm.AccuracyScorer(label_names=labels), cm.MCCScorer(label_names=labels),
                   cm.AccuracyF1Scorer(label_names=labels),
                   cm.ChosenMetricsScorer(["accuracy"], 2, label_names=labels)):
        for _ in range(3):  # a dev set of positives only, every one predicted positive
            scorer.update({"loss": 0.1, "label_ids": 1, "predictions": 1})
        assert scorer.collapse() is None
        scorer.update({"loss": 0.1, "label_ids": 0, "predictions": 1})  # now two classes
        assert scorer.collapse() == "every dev prediction is 'positive'"
