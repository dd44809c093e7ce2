"""Checks that Hugging Face `transformers` loads our exports and computes what we compute.

A measuring instrument, not part of the project: it needs the separate peer environment
(torch + transformers, see ../shared/peers/README.md) and does nothing when it is absent.

    python tools/check_hf_equivalence.py                      # ELECTRA-Small shape, random weights
    python tools/check_hf_equivalence.py --model-dir DATA/models/small   # a pre-trained model
    python tools/check_hf_equivalence.py --peer-python ../peer-venv/bin/python --sentence "..."

Exports the discriminator (ElectraForPreTraining), the generator (ElectraForMaskedLM), a
one-task classifier (ElectraForSequenceClassification) and a tagger
(ElectraForTokenClassification) with export_model.py's functions, has the
peer load each with `from_pretrained` and its tokenizer with AutoTokenizer, and prints the max
absolute difference between their logits and ours on one sentence (last stdout line: JSON).
Both sides compute the exact (erf) GELU, so what remains is float rounding. "imported_*" go the
other way: the library's own save_pretrained output, imported with export_model.py, run here.
Without --model-dir every weight (LayerNorm and biases included) is random, so each mapping
matters; the classifier head is random too.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_PEER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "peer-venv", "bin", "python")
SHARED_VOCAB = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "data", "vocab", "bert-uncased-vocab.txt")

PEER_SCRIPT = r"""
import json, sys
import torch
from transformers import (AutoTokenizer, ElectraForMaskedLM, ElectraForPreTraining,
                          ElectraForSequenceClassification)
job = json.load(open(sys.argv[1]))
from transformers import ElectraForTokenClassification
classes = {"discriminator": ElectraForPreTraining, "generator": ElectraForMaskedLM,
           "classifier": ElectraForSequenceClassification,
           "tagger": ElectraForTokenClassification}
out = {}
for kind, path in job["dirs"].items():
    model = classes[kind].from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    enc = tok(job["sentence"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    out[kind] = {"input_ids": enc["input_ids"][0].tolist(), "logits": logits[0].tolist(),
                 "tokenizer": type(tok).__name__, "hidden_act": model.config.hidden_act}
    model.save_pretrained(path + "_resaved")  # written by the library itself, for the import check
    tok.save_pretrained(path + "_resaved")
json.dump(out, open(sys.argv[2], "w"))
"""


def random_model_dir(path: str, vocab_file: str) -> None:
    """An ELECTRA-Small-shaped pre-training dir and a fine-tuned trial dir, random weights."""
    from model import modeling, tokenization
    from pretrain import scoring
    from util import checkpoint, io_utils

    vocab_size = len(tokenization.load_vocab(vocab_file))
    disc = modeling.get_bert_config("small", vocab_size)
    gen = modeling.get_generator_config(disc, 0.25, 1.0)
    scorer = scoring.ReplacedTokenScorer(disc, gen)
    rng = np.random.default_rng(0)
    unique = {v.ref(): v for v in scorer.variables}
    tensors = {}
    for name, var in checkpoint.by_name(unique.values()).items():
        value = var.numpy()
        scale = 0.1 if name.endswith(("gamma", "beta", "bias")) else 0.02
        if name.startswith("discriminator_predictions/"):
            scale = 0.2  # logits of a few units rather than ~0.1
        tensors[name] = (value + rng.normal(0.0, scale, value.shape)).astype(np.float32)
    checkpoint.CheckpointManager(path).save(tensors, 1)
    io_utils.write_text(os.path.join(path, "bert_config.json"), disc.to_json_string())
    io_utils.write_text(os.path.join(path, "generator_config.json"), gen.to_json_string())
    io_utils.write_text(os.path.join(path, "vocab.txt"), open(vocab_file, encoding="utf-8").read())
    # Fine-tuned trials: SST-2 (2 labels) and chunking (BIOES tags), random heads.
    from finetune.tagging import tagging_tasks
    num_tags = len(tagging_tasks.chunk_label_list(tagging_tasks.Chunking.chunk_types))
    encoder = {n: v for n, v in tensors.items() if n.startswith("electra/")}
    for task, labels in (("sst", 2), ("chunk", num_tags)):
        trial = os.path.join(path, "finetuning_models", f"{task}_model_1")
        head = {f"task_specific/{task}/dense/kernel": rng.normal(0, 0.5, [disc.hidden_size, labels]),
                f"task_specific/{task}/dense/bias": rng.normal(0, 0.5, [labels])}
        checkpoint.CheckpointManager(trial).save(
            dict(encoder, **{n: v.astype(np.float32) for n, v in head.items()}), 1)
        io_utils.write_json(os.path.join(trial, "finetune_config.json"), {
            "bert_config": disc.to_dict(), "init": "pretrained",
            "training_settings": {"task_names": [task], "model_size": "small",
                                  "vocab_size": vocab_size, "max_seq_length": 128}})


def our_logits(model_dir: str, trial_dir: str | None, sentence: str,
               tagger_dir: str | None = None) -> dict:
    import tensorflow as tf

    import score_text
    from finetune import serving
    from model import model_dir as model_dir_lib
    from model import tokenization

    md = model_dir_lib.read_model_dir(model_dir)
    tokenizer = tokenization.build_tokenizer(vocab_file=md.vocab_file,
                                             do_lower_case=md.do_lower_case)
    ids = np.array([score_text.encode(tokenizer, sentence, 512)], np.int32)
    mask, segments = np.ones_like(ids), np.zeros_like(ids)
    scorer = score_text.build_scorer(md, need_generator=md.generator_config is not None)
    result = {"input_ids": ids[0].tolist(),
              "discriminator": scorer.discriminate(ids, mask, segments).numpy()[0]}
    if md.generator_config is not None:
        positions = np.arange(ids.shape[1], dtype=np.int32)[None]
        result["generator"] = scorer.generator_logits(ids, mask, segments, positions).numpy()[0]
    if trial_dir:
        tmd = model_dir_lib.read_model_dir(trial_dir, vocab_file=md.vocab_file)
        config, tasks, model = serving.load_finetuned(tmd)
        module = serving.ServingModule(model, tasks, ids.shape[1])  # sst: any length serves
        out = module.serve(tf.constant(ids), tf.constant(mask), tf.constant(segments))
        result["classifier"] = out["logits"].numpy()[0]
    if tagger_dir:  # the official tagging head: one dense layer on every token
        tmd = model_dir_lib.read_model_dir(tagger_dir, vocab_file=md.vocab_file)
        _, _, model = serving.load_finetuned(tmd)
        encoded = model.encoder(ids, mask, segments, training=False).sequence_output
        result["tagger"] = model.heads[0].dense(encoded).numpy()[0]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", help="pre-training model dir (default: random "
                                            "ELECTRA-Small weights)")
    parser.add_argument("--trial-dir", help="fine-tuning trial dir for the classifier check")
    parser.add_argument("--tagger-dir", help="fine-tuning trial dir of a tagging task")
    parser.add_argument("--peer-python", default=DEFAULT_PEER)
    parser.add_argument("--sentence", default="The quick brown fox jumps over the lazy dog.")
    args = parser.parse_args(argv)
    if not os.path.exists(args.peer_python):
        print(f"peer environment {args.peer_python} not found: nothing checked "
              "(bash ../shared/peers/setup.sh ../peer-venv creates it)")
        return 0
    import export_model
    from model import model_dir as model_dir_lib

    with tempfile.TemporaryDirectory() as work:
        model_dir, trial_dir, tagger_dir = args.model_dir, args.trial_dir, args.tagger_dir
        if model_dir is None:
            model_dir = os.path.join(work, "model")
            random_model_dir(model_dir, SHARED_VOCAB)
            trial_dir = os.path.join(model_dir, "finetuning_models", "sst_model_1")
            tagger_dir = os.path.join(model_dir, "finetuning_models", "chunk_model_1")
        md = model_dir_lib.read_model_dir(model_dir)
        dirs = {"discriminator": os.path.join(work, "hf_disc")}
        export_model.export_huggingface(md, dirs["discriminator"], "discriminator")
        if md.generator_config is not None:
            dirs["generator"] = os.path.join(work, "hf_gen")
            export_model.export_huggingface(md, dirs["generator"], "generator")
        if trial_dir:
            dirs["classifier"] = os.path.join(work, "hf_cls")
            tmd = model_dir_lib.read_model_dir(trial_dir, vocab_file=md.vocab_file)
            export_model.export_huggingface(tmd, dirs["classifier"], "classifier")
        if tagger_dir:
            dirs["tagger"] = os.path.join(work, "hf_tagger")
            tmd = model_dir_lib.read_model_dir(tagger_dir, vocab_file=md.vocab_file)
            export_model.export_huggingface(tmd, dirs["tagger"], "classifier")
        ours = our_logits(model_dir, trial_dir, args.sentence, tagger_dir)
        job, answer = os.path.join(work, "job.json"), os.path.join(work, "answer.json")
        json.dump({"dirs": dirs, "sentence": args.sentence}, open(job, "w"))
        subprocess.run([args.peer_python, "-c", PEER_SCRIPT, job, answer], check=True)
        theirs = json.load(open(answer))
        # The other direction: what the library saved, imported here, computes the same.
        imported = os.path.join(work, "imported")
        export_model.import_huggingface(dirs["discriminator"] + "_resaved", imported,
                                        generator_dir=(dirs["generator"] + "_resaved"
                                                       if "generator" in dirs else None))
        back = our_logits(imported, None, args.sentence)
    ours["imported_discriminator"] = back["discriminator"]
    theirs["imported_discriminator"] = theirs["discriminator"]
    if "generator" in back:
        ours["imported_generator"] = back["generator"]
        theirs["imported_generator"] = theirs["generator"]
    summary = {"sentence": args.sentence, "tokens": len(ours["input_ids"])}
    for kind, peer in theirs.items():
        same_ids = peer["input_ids"] == ours["input_ids"]
        diff = float(np.max(np.abs(np.asarray(peer["logits"]) - ours[kind])))
        scale = float(np.max(np.abs(ours[kind])))
        summary[kind] = {"max_abs_diff": diff, "max_abs_logit": scale, "same_input_ids": same_ids,
                         "hf_tokenizer": peer["tokenizer"], "hf_hidden_act": peer["hidden_act"]}
        print(f"{kind:>22}: max |HF - ours| = {diff:.3g} (logits up to {scale:.3g}); "
              f"token ids {'identical' if same_ids else 'DIFFER'} ({peer['tokenizer']})")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
