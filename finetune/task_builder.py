"""Task names -> Task objects, and the tokenizer tasks share.

To add a task: implement it (see finetune/task.py) and add one line to TASKS,
"name": "package.module:ClassName". Modules are imported only when their task is used, so a task
family (QA, tagging) costs nothing to runs that do not use it. Every registered class is
constructed as Class(config, tokenizer). Tasks defined by data (hparam custom_tasks) need no
code: their family's class in CUSTOM is constructed as Class(config, tokenizer, spec).
"""
import importlib
import logging

import configure_finetuning
from finetune import task as task_lib
from model import pretrained_vocab, tokenization
from util import fs

log = logging.getLogger(__name__)

_GLUE = "finetune.classification.classification_tasks"
TASKS: dict[str, str] = {
    "cola": f"{_GLUE}:CoLA",
    "sst": f"{_GLUE}:SST",
    "mrpc": f"{_GLUE}:MRPC",
    "sts": f"{_GLUE}:STS",
    "qqp": f"{_GLUE}:QQP",
    "mnli": f"{_GLUE}:MNLI",
    "qnli": f"{_GLUE}:QNLI",
    "rte": f"{_GLUE}:RTE",
    "wnli": f"{_GLUE}:WNLI",
    "chunk": "finetune.tagging.tagging_tasks:Chunking",
}
_QA = "finetune.qa.qa_tasks"
# configure_finetuning.QA_TASKS names them all (it sets their sequence length and epochs); the
# MRQA datasets share one class, constructed with the task's name.
TASKS.update({"squad": f"{_QA}:SQuAD", "squadv1": f"{_QA}:SQuADv1"})
TASKS.update({name: f"{_QA}:MRQATask" for name in configure_finetuning.QA_TASKS
              if name not in TASKS})


_CUSTOM = "finetune.classification.custom_tasks"
CUSTOM: dict[str, str] = {
    "classification": f"{_CUSTOM}:CustomClassification",
    "regression": f"{_CUSTOM}:CustomRegression",
    "tagging": "finetune.tagging.tagging_tasks:CustomTagging",
    "qa": f"{_QA}:CustomQA",
}


def load_class(path: str) -> type:
    module_name, class_name = path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def build_tokenizer(config: configure_finetuning.FinetuningConfig):
    """The tokenizer of the pre-trained model: WordPiece vocab.txt, or a SentencePiece .model.

    Raises:
      ValueError: the vocabulary file is missing, larger than the model's vocab_size, or of
        another size than init_checkpoint's embedding table.
    """
    path = config.vocab_file
    if not path or not fs.isfile(path):
        raise ValueError(f"vocabulary file {path} not found (hparam vocab_file; by default "
                         "the one in init_checkpoint's directory, else in "
                         "<data_dir>/models/<model_name>, else <data_dir>/vocab.txt)")
    if path.endswith(".model"):
        tokenizer = tokenization.build_tokenizer(spm_model=path,
                                                 do_lower_case=config.do_lower_case)
    else:
        tokenizer = tokenization.build_tokenizer(vocab_file=path,
                                                 do_lower_case=config.do_lower_case)
    pretrained_vocab.check_size(path, tokenizer.vocab_size, config.init_checkpoint)
    # The model's size: the pre-trained bert_config.json's when there is one (hparam vocab_size
    # otherwise); ids past it would index outside the embedding table.
    model_vocab_size = config.bert_config().vocab_size
    if tokenizer.vocab_size > model_vocab_size:
        source = config.pretrained_bert_config_file() or "hparam vocab_size"
        raise ValueError(f"vocabulary {path} has {tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size is {model_vocab_size} ({source}); use the pre-trained "
                         "model's vocabulary")
    if tokenizer.vocab_size != model_vocab_size:
        log.warning("vocabulary %s has %d tokens, the model's vocab_size is %d", path,
                    tokenizer.vocab_size, model_vocab_size)
    return tokenizer


def task_class(name: str, config: configure_finetuning.FinetuningConfig | None = None) -> type:
    """The Task class of `name`: registered, or the family class of a custom task (imported)."""
    custom = config.custom_task_specs() if config is not None else {}
    if name in custom:
        if name in TASKS:
            raise ValueError(f"hparam custom_tasks.{name}: {name!r} is a built-in task; give "
                             "yours another name")
        return load_class(CUSTOM[custom[name].family])
    if name not in TASKS:
        known = sorted(TASKS) + [f"{n} (custom_tasks)" for n in sorted(custom)]
        raise ValueError(f"Unknown task {name!r}; known tasks: {', '.join(known)}; define "
                         "your own in hparam custom_tasks")
    return load_class(TASKS[name])


def get_task(config: configure_finetuning.FinetuningConfig, task_name: str,
             tokenizer) -> task_lib.Task:
    spec = config.custom_task_specs().get(task_name)
    cls = task_class(task_name, config)
    if spec is not None:
        return cls(config, tokenizer, spec)
    if TASKS[task_name].endswith(":MRQATask"):
        return cls(config, tokenizer, task_name)
    return cls(config, tokenizer)


def get_tasks(config: configure_finetuning.FinetuningConfig, tokenizer=None) -> list[task_lib.Task]:
    """One Task per entry of config.task_names, in that order (task_id = position)."""
    for name in config.task_names:
        task_class(name, config)  # unknown names fail before the tokenizer loads
    if len(set(config.task_names)) != len(config.task_names):
        raise ValueError(f"task_names lists a task twice: {config.task_names}")
    tokenizer = tokenizer if tokenizer is not None else build_tokenizer(config)
    tasks = [get_task(config, name, tokenizer) for name in config.task_names]
    for task in tasks:
        # What a custom task read from its training file (labels, score range) joins its spec:
        # the trial's settings then carry it, and predicting needs no training data.
        if task.name in config.custom_tasks:
            config.custom_tasks[task.name].update(task.model_settings())
    return tasks
