"""Every place a fine-tuning run writes, for the locks it holds on them (util/place_locks.py).

A lock beside `model_dir` alone did not cover what it guards: a second run reaching a trial
directory, the feature cache or a results file under another name (a symlink, `..`) trained or
wrote there at the same time. Each of those places is locked where it really is.
"""
import configure_finetuning
from finetune import trainer
from finetune.qa import qa_tasks
from util.place_locks import Place


def places(config: configure_finetuning.FinetuningConfig, tasks) -> list[Place]:
    """The run's outputs in the order they are locked (the trials' common name first)."""
    result = [Place("hparam 'model_dir'", config.model_dir, False)]
    result += [Place(f"trial {trial}'s directory", trainer.trial_dir(config, trial), True)
               for trial in range(1, config.num_trials + 1)]
    result += [Place("hparam 'results_json'", config.results_json, False),
               Place("hparam 'results_txt'", config.results_txt, False),
               Place("hparam 'preprocessed_data_dir'", config.preprocessed_data_dir, True)]
    if any(isinstance(task, qa_tasks.QATask) for task in tasks):
        result.append(Place("hparam 'qa_dir'", config.qa_dir, True))
    return result
