"""--hparams parsing and the resolved pre-training / fine-tuning configs."""
import json

import pytest

from configure_finetuning import FinetuningConfig
from configure_pretraining import PretrainingConfig
from util.hparams import HParamError


def pretrain(hparams=None):
    return PretrainingConfig.from_hparams("m", "/data", hparams)


def test_official_defaults():
    c = pretrain()
    assert (c.mask_prob, c.disc_weight, c.gen_weight, c.learning_rate) == (0.15, 50.0, 1.0, 5e-4)
    assert (c.num_warmup_steps, c.train_batch_size, c.num_train_steps) == (10000, 128, 1000000)
    assert (c.generator_hidden_size, c.embedding_size, c.keep_checkpoint_max) == (0.25, 128, 5)
    assert c.max_predictions_per_seq == int((0.15 + 0.005) * 128) == 19
    assert c.pretrain_tfrecords == "/data/pretrain_tfrecords/pretrain_data.tfrecord*"
    assert c.vocab_file == "/data/vocab.txt" and c.model_dir == "/data/models/m"


def test_model_size_sets_table_6_and_user_values_win():
    base = pretrain({"model_size": "base"})
    assert (base.learning_rate, base.train_batch_size, base.embedding_size) == (2e-4, 256, 768)
    assert abs(base.generator_hidden_size - 1 / 3) < 1e-9
    large = pretrain({"model_size": "large", "mask_prob": 0.2})
    assert (large.mask_prob, large.train_batch_size) == (0.2, 2048)
    assert large.max_predictions_per_seq == int(0.205 * 512)


def test_debug_mode_and_precedence():
    c = pretrain({"debug": True, "num_train_steps": 7})
    assert (c.train_batch_size, c.num_train_steps, c.eval_batch_size) == (8, 7, 4)
    assert c.bert_config().hidden_size == 144 and c.bert_config().num_hidden_layers == 3


def test_hparams_from_json_file(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"learning_rate": 1e-3, "model_hparam_overrides": {"hidden_size": 64}}))
    c = pretrain(str(path))
    assert c.learning_rate == 1e-3 and c.bert_config().hidden_size == 64


def test_int_accepted_for_float_but_not_bool():
    assert pretrain({"disc_weight": 10}).disc_weight == 10.0
    with pytest.raises(HParamError, match="hparam 'disc_weight' expects float, got bool True"):
        pretrain({"disc_weight": True})


@pytest.mark.parametrize("hparams, message", [
    ({"mask_probb": 0.1}, "Unknown hparam 'mask_probb'; did you mean mask_prob"),
    ({"learnig_rate": 0.1}, "did you mean learning_rate"),
    ({"num_train_steps": "ten"}, "hparam 'num_train_steps' expects int, got str 'ten'"),
    ({"debug": "false"}, "hparam 'debug' expects bool, got str 'false'"),
    ({"model_size": "huge"}, "unknown model_size 'huge'; expected one of \\['base', 'large', 'small'\\]"),
    ({"mask_prob": 1.5}, "hparam 'mask_prob' must be in \\(0, 1\\), got 1.5"),
    ({"strategy": "horovod"}, "hparam 'strategy' must be one of"),
    ({"max_seq_length": 1024}, "max_seq_length \\(1024\\) exceeds max_position_embeddings \\(512\\)"),
    ({"model_hparam_overrides": {"hiden_size": 3}}, "unknown keys \\['hiden_size'\\]"),
    ('{"a": ', "neither a JSON object nor a path"),
    ("/no/such/file.json", "file /no/such/file.json does not exist"),
])
def test_pretraining_config_errors(hparams, message):
    with pytest.raises(ValueError, match=message):
        pretrain(hparams)


def test_finetuning_defaults_per_task_and_size():
    c = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["sst"]})
    assert (c.learning_rate, c.layerwise_lr_decay, c.num_train_epochs) == (3e-4, 0.8, 3.0)
    assert (c.train_batch_size, c.warmup_proportion, c.max_seq_length) == (32, 0.1, 128)
    assert c.init_checkpoint == "/data/models/m"
    assert c.model_dir == "/data/models/m/finetuning_models/sst_model"
    assert c.task_data_dir("sst") == "/data/finetuning_data/sst"
    rte = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["rte"], "model_size": "large"})
    assert (rte.num_train_epochs, rte.learning_rate, rte.layerwise_lr_decay) == (10.0, 5e-5, 0.9)
    squad = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["squad"], "model_size": "base"})
    assert (squad.max_seq_length, squad.num_train_epochs, squad.learning_rate) == (512, 2.0, 1e-4)
    chunk = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["chunk"],
                                                         "num_train_epochs": 1})
    assert (chunk.max_seq_length, chunk.num_train_epochs) == (256, 1.0)



def test_finetuning_outputs_follow_the_users_model_dir():
    """Two experiments with their own model_dir wrote their results, QA files, test predictions
    and feature caches to the same default files (by task names only), the second replacing the
    first; without a model_dir the official places stay."""
    official = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["squad"]})
    assert (official.results_txt, official.results_json, official.qa_dir) == (
        "/data/models/m/results/squad_results.txt", "/data/models/m/results/squad_results.json",
        "/data/models/m/results/squad_qa")
    assert official.test_predictions_dir == "/data/models/m/test_predictions"
    assert official.preprocessed_data_dir == "/data/models/m/finetuning_tfrecords/squad_tfrecords"
    outputs = ("results_txt", "results_json", "qa_dir", "test_predictions_dir",
               "preprocessed_data_dir")
    first, second = (FinetuningConfig.from_hparams("m", "/data", {
        "task_names": ["squad"], "model_dir": f"/exp/{name}"}) for name in ("a", "b"))
    for key in outputs:
        assert getattr(first, key).startswith("/exp/a/"), (key, getattr(first, key))
        assert getattr(second, key).startswith("/exp/b/"), (key, getattr(second, key))
    assert first.results_json == "/exp/a/results/squad_results.json"
    chosen = FinetuningConfig.from_hparams("m", "/data", {
        "task_names": ["squad"], "model_dir": "/exp/a", "results_json": "/r.json"})
    assert chosen.results_json == "/r.json"  # a path the user gives wins


def test_per_example_eval_outputs_of_runs_sharing_a_results_dir_stay_apart():
    """chunking alone, chunking with SST-2, and an experiment naming its own results file in the
    same dir each wrote results/chunk_dev_trial1_*: the last run's replaced the others'."""
    def prefix(**hparams):
        config = FinetuningConfig.from_hparams("m", "/data", {"task_names": ["chunk"], **hparams})
        return config.eval_output_prefix("chunk", "dev", 2)
    assert prefix() == "/data/models/m/results/chunk_dev_trial2"  # the default keeps its name
    assert prefix(task_names=["chunk", "sst"]) == \
        "/data/models/m/results/chunk,sst_chunk_dev_trial2"
    assert prefix(results_txt="/data/models/m/results/ft_lr0.01.txt") == \
        "/data/models/m/results/ft_lr0.01_chunk_dev_trial2"


def test_finetuning_config_errors():
    with pytest.raises(HParamError, match="Unknown hparam 'layerwise_decay'; did you mean layerwise_lr_decay"):
        FinetuningConfig.from_hparams("m", "/d", {"layerwise_decay": 0.8})
    with pytest.raises(HParamError, match=r"hparam 'task_names' expects list\[str\], got str 'sst'"):
        FinetuningConfig.from_hparams("m", "/d", {"task_names": "sst"})


def test_every_hparam_has_a_meaning():
    for cls in (PretrainingConfig, FinetuningConfig):
        for name, _, _, meaning in cls.describe():
            assert meaning, f"{cls.__name__}.{name} has no help text"


def test_finetuning_reads_the_pretrained_architecture(tmp_path):
    from model import modeling
    model_dir = tmp_path / "models" / "tiny"
    model_dir.mkdir(parents=True)
    saved = modeling.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=256, embedding_size=32)
    (model_dir / "bert_config.json").write_text(saved.to_json_string())
    c = FinetuningConfig.from_hparams("tiny", str(tmp_path), {"task_names": ["sst"]})
    assert c.bert_config() == saved
    dropped = FinetuningConfig.from_hparams(
        "tiny", str(tmp_path), {"task_names": ["sst"],
                                "model_hparam_overrides": {"hidden_dropout_prob": 0.2}})
    assert dropped.bert_config().hidden_dropout_prob == 0.2
    assert dropped.bert_config().hidden_size == 64
    random_init = FinetuningConfig.from_hparams("tiny", str(tmp_path), {"task_names": ["sst"],
                                                                         "init_checkpoint": ""})
    assert random_init.bert_config().hidden_size == 256  # the model size's (small) architecture


@pytest.mark.parametrize("make, where", [
    (lambda: PretrainingConfig.from_hparams("m", "file://data", {}), "--data-dir file://data"),
    (lambda: PretrainingConfig.from_hparams("m", "/d",
                                            {"probe_tasks": {"pos": "file://c/pos.txt"}}),
     "hparam 'probe_tasks.pos' file://c/pos.txt"),
    (lambda: FinetuningConfig.from_hparams("m", "/d", {"task_names": ["sst"],
                                                       "raw_data_dir": "file://glue/{task}"}),
     "hparam 'raw_data_dir' file://glue/{task}"),
    (lambda: FinetuningConfig.from_hparams("m", "/d", {"task_names": ["mine"], "custom_tasks": {
        "mine": {"type": "classification", "train": "file://d/train.csv", "text_a": "t",
                 "label": "l"}}}), "hparam 'custom_tasks.mine.train' file://d/train.csv"),
])
def test_a_relative_file_url_is_refused_wherever_a_path_enters_the_hparams(make, where):
    # file://data names host "data", path /: TensorFlow would read and write at the root.
    with pytest.raises(HParamError) as e:
        make()
    assert str(e.value).startswith(where + ": a file:// URL needs an absolute path"), str(e.value)
    assert "Did you mean file:///" in str(e.value)
