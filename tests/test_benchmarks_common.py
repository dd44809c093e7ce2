"""Tests for benchmarks/common.py's pure helpers: ours against each peer configuration, per round."""
import argparse
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import common  # noqa: E402


def _run(config, round_number, sps, limits=(200.0, 400.0)):
    return {"peer_config": config, "round": round_number, "sequences_per_sec": sps,
            "limits": {"float32": limits[0], "bfloat16": limits[1]}}


def test_bench_peer_comparison_per_config_and_round():
    runs = [_run("fp32", 1, 10.0), _run("bf16", 1, 20.0),
            _run("fp32", 2, 12.0), _run("bf16", 2, 16.0)]
    # ours: 16 sequences per step, 1 s then 0.5 s per step -> 16 and 32 seq/s per round
    rounds = [([1.0, 1.0], 200.0), ([0.5, 0.5], 210.0)]
    fields = common.peer_comparison(24.0, 16, rounds, runs)
    assert fields["peer_sequences_per_sec_fp32"] == 11.0
    assert fields["peer_sequences_per_sec_bf16"] == 18.0
    assert fields["ratio_vs_peer_fp32"] == round(24 / 11, 3)
    assert fields["ratio_vs_peer_bf16"] == round(24 / 18, 3)
    assert fields["ratio_per_round_fp32"] == [1.6, round(32 / 12, 3)]
    assert fields["ratio_per_round_bf16"] == [0.8, 2.0]
    # the keys of the float32-only comparison stay
    assert fields["peer_sequences_per_sec"] == 11.0
    assert fields["ratio_per_round"] == fields["ratio_per_round_fp32"]


def test_bench_peer_comparison_old_runs_and_no_peer():
    # runs without peer_config / round: float32, the i-th is round i + 1
    fields = common.peer_comparison(20.0, 8, [([1.0], 1.0), ([0.8], 1.0)],
                                    [{"sequences_per_sec": 10.0}, {"sequences_per_sec": 5.0}])
    assert fields["ratio_per_round"] == [0.8, 2.0]
    assert common.peer_comparison(20.0, 8, [([1.0], 1.0)], []) == {}


def test_bench_latency_ratios_lower_is_faster():
    runs = [{"peer_config": "bf16", "round": 1, "latency_ms_median": 30.0},
            {"peer_config": "bf16", "round": 2, "latency_ms_median": 50.0}]
    fields = common.peer_ratios(20.0, [15.0, 25.0], runs, "latency_ms_median",
                                higher_is_faster=False, suffix="_latency")
    assert fields == {"peer_latency_ms_median_bf16": 40.0, "ratio_vs_peer_bf16_latency": 2.0,
                      "ratio_per_round_bf16_latency": [2.0, 2.0]}


def test_bench_peer_config_list():
    parse = common.peer_config_list(("fp32", "bf16", "bf16+compile"))
    assert parse(" fp32, bf16+compile ") == ["fp32", "bf16+compile"]
    for bad in ("fp32,compile", "", "fp32,fp32"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    parser = argparse.ArgumentParser()
    common.add_round_args(parser, steps=2, warmup=1)
    assert parser.parse_args([]).peer_configs == ["fp32", "bf16"]


def test_bench_throughput_table_cells():
    ours = {"impl": "ours-tf", "dtype": "bfloat16", "xla": False, "sequences_per_sec": 20.0,
            "ratio_vs_peer_fp32": 1.5, "ratio_per_round_fp32": [1.5, 1.4],
            "ratio_vs_peer_bf16_compile": 1.1, "ratio_per_round_bf16_compile": [1.1, 1.2],
            **common.limit_fields([{"float32": 210.4, "bfloat16": 420.0},
                                   {"float32": 200.0, "bfloat16": 410.0}])}
    assert ours["limit_gflops_float32"] == 205.2
    peer = {"impl": "peer-hf-pytorch", "dtype": "bfloat16", "compile": True, "round": 1,
            **common.limit_fields([{"float32": 200.0, "bfloat16": 400.0}])}
    table = common.throughput_table([ours, peer], []).splitlines()
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert header[6:9] == ["x peer fp32", "x peer bf16", "x peer bf16+compile"]
    assert header[9] == "x peer per round"
    ours_cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    peer_cells = [cell.strip() for cell in table[3].strip("|").split("|")]
    assert len(ours_cells) == len(peer_cells) == len(header)
    assert ours_cells[9] == "fp32 1.50, 1.40; bf16+compile 1.10, 1.20"
    assert ours_cells[header.index("limits fp32/bf16 GFLOP/s")] == "210/420, 200/410"
    assert peer_cells[1] == "bfloat16 +compile"
