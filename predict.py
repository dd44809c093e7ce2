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
(finetune/prediction.py lists the formats and fields); an empty line or text before the last
example is refused with its file:line rather than dropped. Every format reads from standard
input too. Records are written as they are made (to a temporary file renamed at the end, so a
failed or signalled run leaves no partial file behind; on gs:// or s3:// that rename is a copy
then a delete, and a run killed between the two leaves the new output and a
`.<name>.<pid>.*.tmp` object beside it: delete that). A trial whose training has not finished
is predicted with a warning. Exit status: 0 done, 2 bad input or model directory, 5 out of memory
(pass a smaller --batch-size), 75 stopped by SIGTERM/SIGINT (at the next batch; --output not
written).
"""
import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile

from util import console  # first: keeps TensorFlow's start-up lines off the console

from tqdm import tqdm

from finetune import prediction
from finetune import serving
from finetune import task as task_lib
from finetune import trainer
from model import model_dir as model_dir_lib
from util import fs
from util import io_utils
from util import out_of_memory
from util import preemption
from util import write_errors
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
    p.add_argument("--checkpoint", help="a checkpoint of the trial other than its newest")
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
        with write_errors.naming(path, "--output"), io_utils.atomic_open(path, "w") as f:
            yield f


def check_paths(args) -> None:
    """Refuses, before any work, an input that is not a file and an output that would replace
    the input or is a directory."""
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    fs.check_spellings({"--model-dir": args.model_dir, "--vocab-file": args.vocab_file,
                        "--checkpoint": args.checkpoint,
                        "--input": None if args.input == "-" else args.input,
                        "--output": None if args.output == "-" else args.output})
    if args.input != "-":
        if fs.isdir(args.input):
            raise ValueError(f"--input {args.input} is a directory; give a file (or - for "
                             "standard input)")
        if not fs.exists(args.input):  # a pipe or /dev/null exists, and is read as stdin is
            raise ValueError(f"--input {args.input} does not exist")
        if fs.isfile(args.input) and fs.getsize(args.input) == 0:
            raise ValueError(f"--input {args.input} is empty: there is nothing to predict")
    if args.output == "-":
        return
    if fs.isdir(args.output):
        raise ValueError(f"--output {args.output} is a directory; give a file path, e.g. "
                         f"{os.path.join(args.output, 'predictions.jsonl')}")
    if args.input != "-" and fs.same_place(args.output, args.input):
        raise ValueError(f"--output {args.output} is the --input file {args.input}: the "
                         "predictions would replace the input; give another path")
    parent = os.path.dirname(fs.abspath(args.output))
    if not fs.isdir(parent):
        raise ValueError(f"--output {args.output}: directory {parent} does not exist")
    write_errors.check_writable("--output", args.output)  # now, not after the predictions


def check_output_apart_from_model(output: str, md: model_dir_lib.ModelDir) -> None:
    """Refuses an --output that would replace a file the prediction reads: the vocabulary or
    one of the trial's own files (settings, checkpoints, results)."""
    if output == "-":
        return
    if md.vocab_file and fs.same_place(output, md.vocab_file):
        raise ValueError(f"--output {output} is the vocabulary {md.vocab_file}: the predictions "
                         "would replace it; give another path")
    if fs.relation(output, md.path) == "inside" and fs.exists(output):
        raise ValueError(f"--output {output} is a file of --model-dir {md.path}: the predictions "
                         "would replace it; give a new file name")


def warn_if_unfinished(md: model_dir_lib.ModelDir) -> None:
    """A trial halted before its last step, or one that diverged, predicts with a partly
    trained model: said so, with what a re-run would (not) change."""
    saved = io_utils.read_json(os.path.join(md.path, model_dir_lib.FINETUNE_CONFIG_FILE))
    results = os.path.join(md.path, trainer.RESULTS_FILE)
    record = io_utils.read_json(results) if fs.exists(results) else {}
    train_steps = saved.get("train_steps") or record.get("train_steps")
    step = int(md.checkpoint.rsplit("-", 1)[1]) if "-" in md.checkpoint else None
    if record.get("diverged"):
        log.warning("%s is a trial that diverged (%s): these are the predictions of its last "
                    "good checkpoint (step %s); re-running its command would diverge again, so "
                    "train another trial with other settings", md.path, record["diverged"], step)
    elif train_steps is None:
        log.warning("%s records no step count, so whether its training finished is unknown",
                    md.path)
    elif step is not None and step < train_steps:
        log.warning("%s is a halted trial: its checkpoint is at step %d of %d, so these are a "
                    "partly trained model's predictions; re-run its run_finetuning.py command "
                    "to finish it", md.path, step, train_steps)


@contextlib.contextmanager
def _input_file(path: str):
    """The input as a regular file: standard input, and a pipe or device given as --input
    (/dev/stdin, bash's <(...), /dev/null), are copied to a temporary file first, so every
    format (tables, CoNLL, SQuAD) reads from it; messages name it as given (<stdin>). An input
    with nothing in it is refused: there is nothing to predict."""
    if path != "-" and fs.isfile(path):
        yield path
        return
    name = "<stdin>" if path == "-" else path
    with tempfile.TemporaryDirectory() as directory:
        copy = os.path.join(directory, "stdin")
        with open(copy, "wb") as f, (contextlib.nullcontext(sys.stdin.buffer) if path == "-"
                                     else fs.open(path, "rb")) as source:
            shutil.copyfileobj(source, f)
        if fs.getsize(copy) == 0:
            shown = "standard input" if path == "-" else f"--input {path}"
            raise ValueError(f"{shown} is empty: there is nothing to predict")
        try:
            yield copy
        except task_lib.TaskDataError as e:
            raise task_lib.TaskDataError(str(e).replace(copy, name)) from None


def predict(args) -> int:
    check_paths(args)
    with _input_file(args.input) as path:  # read first: an empty input before the model loads
        md = model_dir_lib.read_model_dir(args.model_dir, checkpoint_path=args.checkpoint,
                                          vocab_file=args.vocab_file)
        check_output_apart_from_model(args.output, md)
        config, tasks, model = serving.load_finetuned(md)
        warn_if_unfinished(md)
        task = pick_task(tasks, args.task)
        fmt = args.format or prediction.guess_format(args.input)
        examples = prediction.read_examples(task, path, fmt)
    predictor = prediction.Predictor(config, tasks, model, task,
                                     args.batch_size or config.predict_batch_size)
    log.info("%s: %d examples of task %s (%s)", args.input, len(examples), task.name, fmt)
    written = 0
    try:
        with _output(args.output) as out, tqdm(total=len(examples), unit="ex",
                                               disable=args.no_progress, file=sys.stderr) as bar:
            for start in range(0, len(examples), CHUNK_EXAMPLES):
                chunk = examples[start:start + CHUNK_EXAMPLES]
                for record in predictor.records(chunk):
                    out.write(io_utils.json_line(record))
                    written += 1
                bar.update(len(chunk))
    except preemption.Preempted as e:
        where = (f"--output {args.output} was not written" if args.output != "-" else
                 f"standard output holds the first {written} records, whole lines")
        raise preemption.Preempted(f"{e}; {where}") from None
    if args.output != "-":
        log.info("wrote %d predictions to %s", len(examples), args.output)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    console.setup(args.verbose)
    try:
        with preemption.install():
            return predict(args)
    except preemption.Preempted as e:
        log.warning("%s", e)
        return preemption.EXIT_PREEMPTED
    except (task_lib.TaskDataError, HParamError, ValueError, OSError) as e:
        log.error("%s", e)
        return 2
    except out_of_memory.ERRORS as e:
        batch = (f"--batch-size {args.batch_size}" if args.batch_size
                 else "the trial's predict_batch_size (--batch-size not given)")
        log.error("%s", out_of_memory.message(
            e, f"{batch} and the trial's max_seq_length",
            "pass a smaller --batch-size; --output was not written"))
        return out_of_memory.EXIT_OUT_OF_MEMORY


if __name__ == "__main__":
    status = main()
    if status == preemption.EXIT_PREEMPTED:
        preemption.exit_now(status)  # within the grace period: skip the interpreter's teardown
    sys.exit(status)
