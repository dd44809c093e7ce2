"""Predicts with a fine-tuned model on new text: one JSON object per input example.

    # a classifier (a custom task or a GLUE one): one text per line
    python predict.py --model-dir DATA/models/small/finetuning_models/reviews_model_1 \\
        --input new_reviews.txt --output predictions.jsonl
    # a table or JSON lines with the task's text fields; standard input and output
    cat pairs.jsonl | python predict.py --model-dir TRIAL --format jsonl
    # a tagger: one sentence per line (or --format conll / jsonl)
    python predict.py --model-dir .../ner_model_1 --input sentences.txt
    # QA: {"context", "question", "id"} per line, or a SQuAD-format file (--format squad)
    python predict.py --model-dir .../myqa_model_1 --input questions.jsonl

The model directory is a fine-tuning trial (`<model_dir>_<trial>`): its settings, labels and
weights are read from it, the vocabulary and casing from the pre-trained model it started from
(two levels up; --vocab-file overrides). Output line i is the prediction for input example i
(finetune/prediction.py lists the formats and fields). Records are written as they are made
(to a temporary file renamed at the end, so a failed run leaves no partial file behind).
Exit status: 0 done, 2 bad input or model directory.
"""
import argparse
import contextlib
import logging
import sys

from util import console  # first: keeps TensorFlow's start-up lines off the console

from tqdm import tqdm

from finetune import prediction
from finetune import serving
from finetune import task as task_lib
from model import model_dir as model_dir_lib
from util import io_utils
from util.hparams import HParamError

log = logging.getLogger("predict")

# Examples featurized and predicted at a time: bounds memory on large inputs.
CHUNK_EXAMPLES = 2048


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", required=True, help="a fine-tuning trial directory")
    p.add_argument("--input", default="-", help="input file; - (default) for standard input")
    p.add_argument("--format", choices=prediction.FORMATS,
                   help="input format (default from the extension: .txt lines, .tsv, .csv, "
                        ".jsonl, .json squad, .conll; standard input: lines)")
    p.add_argument("--output", default="-", help="JSONL output file; - (default) for stdout")
    p.add_argument("--task", help="the task to predict (needed when the trial learned several)")
    p.add_argument("--batch-size", type=int, help="default: the trial's predict_batch_size")
    p.add_argument("--vocab-file", help="override the vocabulary found for the model")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    console.add_verbose_flag(p)
    return p.parse_args(argv)


def pick_task(tasks, name: str | None):
    names = [t.name for t in tasks]
    if name is None:
        if len(tasks) != 1:
            raise ValueError(f"the trial learned tasks {names}; pass --task to choose one")
        return tasks[0]
    if name not in names:
        raise ValueError(f"--task {name!r}: the trial learned {names}")
    return tasks[names.index(name)]


@contextlib.contextmanager
def _output(path: str):
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
    else:
        with io_utils.atomic_open(path, "w") as f:
            yield f


def predict(args) -> int:
    md = model_dir_lib.read_model_dir(args.model_dir, vocab_file=args.vocab_file)
    config, tasks, model = serving.load_finetuned(md)
    task = pick_task(tasks, args.task)
    fmt = args.format or prediction.guess_format(args.input)
    examples = prediction.read_examples(task, args.input, fmt)
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    predictor = prediction.Predictor(config, tasks, model, task,
                                     args.batch_size or config.predict_batch_size)
    log.info("%s: %d examples of task %s (%s)", args.input, len(examples), task.name, fmt)
    with _output(args.output) as out, tqdm(total=len(examples), unit="ex",
                                           disable=args.no_progress, file=sys.stderr) as bar:
        for start in range(0, len(examples), CHUNK_EXAMPLES):
            chunk = examples[start:start + CHUNK_EXAMPLES]
            for record in predictor.records(chunk):
                out.write(io_utils.json_line(record))
            bar.update(len(chunk))
    if args.output != "-":
        log.info("wrote %d predictions to %s", len(examples), args.output)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    console.setup(args.verbose)
    try:
        return predict(args)
    except (task_lib.TaskDataError, HParamError, ValueError, FileNotFoundError) as e:
        log.error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
