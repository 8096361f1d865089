"""Traffic generators: scaling rule, seeds, every law, the matrix file and the trace."""

from __future__ import annotations

import gzip
import io
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.errors import UsageError
from commbench.harness.workloads import (
    DEFAULT_SEED,
    MEGATRON_TRACE,
    expand_workloads,
    generate,
    parse_workload,
    read_matrix,
    write_matrix,
)

TRACE = MEGATRON_TRACE
SCALED = ["uniform", "random", "zipf", "zipf:0.3", "hotspot", "hotspot:2", "moe:16,2"]


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(SCALED),
    p=st.integers(1, 24),
    size=st.integers(0, 5_000_000),
    unit=st.sampled_from([1, 2, 3, 4, 8, 12]),
    seed=st.integers(0, 2**32),
)
def test_scaling_rule(spec, p, size, unit, seed):
    assume(not (spec == "hotspot:2" and p < 2))
    d = generate(spec, p, size, seed=seed, unit=unit)
    assert d.shape == (p, p) and d.dtype == np.int64
    assert (d >= 0).all() and (d % unit == 0).all()
    assert int(d.sum()) == unit * (p * size // unit)  # sum(D) / P == size up to the unit


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 20), size=st.integers(0, 10**6), unit=st.sampled_from([1, 4, 6]),
       k=st.integers(1, 6))  # fmt: skip
def test_perm_sum_is_balanced(p, size, unit, k):
    d = generate(f"perm-sum:{k}", p, size, unit=unit)
    row = unit * (size // unit)
    assert (d.sum(axis=1) == row).all() and (d.sum(axis=0) == row).all()
    assert (d % unit == 0).all()


def test_uniform_entries_are_equal_when_divisible():
    d = generate("uniform", 8, 8 * 1024, unit=4)
    assert (d == 1024).all()
    e = generate("uniform", 3, 10)  # 30 bytes over 9 entries: 3 or 4 each, rows within one
    assert set(np.unique(e)) <= {3, 4} and e.sum() == 30
    assert e.sum(axis=1).max() - e.sum(axis=1).min() <= 1


def test_seeds_and_spec_seed_wins():
    a = generate("zipf:0.8", 16, 1 << 20, seed=3)
    assert np.array_equal(a, generate("zipf:0.8", 16, 1 << 20, seed=3))
    assert not np.array_equal(a, generate("zipf:0.8", 16, 1 << 20, seed=4))
    assert np.array_equal(generate("zipf:0.8@3", 16, 1 << 20, seed=9), a)
    assert np.array_equal(generate("random", 5, 100), generate("random", 5, 100, seed=DEFAULT_SEED))


def test_zipf_skew_grows_with_the_exponent():
    flat = generate("zipf:0.1", 32, 1 << 20)
    steep = generate("zipf:0.99", 32, 1 << 20)
    assert steep.max() / steep.mean() > 5 * flat.max() / flat.mean()
    assert np.array_equal(generate("zipf", 8, 1000), generate("zipf:0.8", 8, 1000))


def test_hotspot_sends_half_to_the_hot_ranks():
    d = generate("hotspot:2", 16, 1 << 20, unit=1)
    cols = d.sum(axis=0)
    hot = np.argsort(cols)[-2:]
    assert cols[hot].sum() == pytest.approx(d.sum() / 2, rel=0.1)


def test_moe_routes_to_expert_ranks_only():
    d = generate("moe:4,2", 8, 1 << 16)  # experts 0..3 live on ranks 0..3
    assert d[:, 4:].sum() == 0 and d[:, :4].sum() == d.sum()
    e = generate("moe:64,6", 16, 1 << 20)
    assert (e.sum(axis=0) > 0).all()
    assert np.array_equal(e, generate("moe:64,6", 16, 1 << 20))


def test_trace_index_picks_a_matrix():
    spec = f"trace:{TRACE},hidden=4096,dtype=2"
    raw = np.loadtxt(gzip.open(TRACE), dtype=np.int64, max_rows=2 * 1024).reshape(2, 32, 32)
    assert np.array_equal(generate(spec, 32, 0), raw[0] * 4096 * 2)
    assert np.array_equal(generate(spec, 32, 0, index=1), raw[1] * 8192)
    assert np.array_equal(generate(spec, 32, 0, index=601), raw[1] * 8192)  # index mod 600
    scaled = generate(f"trace:{TRACE}", 32, 1 << 20, unit=2, index=1)
    assert scaled.sum() == 32 << 20 and (scaled % 2 == 0).all()
    assert np.corrcoef(scaled.ravel(), raw[1].ravel())[0, 1] > 0.999
    rounded = generate(f"trace:{TRACE},hidden=3,dtype=1", 32, 0, unit=4)
    assert (rounded % 4 == 0).all() and (rounded >= raw[0] * 3).all()


def test_trace_rank_count_must_match(tmp_path):
    with pytest.raises(UsageError, match="32-rank matrices but the run has 16"):
        generate(f"trace:{TRACE}", 16, 1024)
    f = tmp_path / "t.txt"
    f.write_text("\n".join(["1"] * 8))
    with pytest.raises(UsageError, match="whole number of 3x3"):
        generate(f"trace:{f}", 3, 10)
    assert generate(f"trace:{f},ranks=2,hidden=1,dtype=1", 2, 0).tolist() == [[1, 1], [1, 1]]
    with pytest.raises(UsageError, match="cannot read trace"):
        generate(f"trace:{tmp_path}/missing-2x2.txt", 4, 10)


def test_a_folded_trace_keeps_each_group_s_traffic():
    raw = np.loadtxt(gzip.open(TRACE), dtype=np.int64, max_rows=1024).reshape(32, 32)
    folded = generate(f"trace:{TRACE},fold=8,hidden=1,dtype=1", 8, 0)
    assert folded.sum() == raw.sum()
    assert folded[1, 6] == raw[4:8, 24:28].sum()  # ranks 4-7 to ranks 24-27
    scaled = generate(f"trace:{TRACE},fold=8", 8, 1 << 20, unit=2)
    assert scaled.sum() == 8 << 20
    assert np.corrcoef(scaled.ravel(), folded.ravel())[0, 1] > 0.999


@pytest.mark.parametrize(
    "spec, p, message",
    [
        (f"trace:{TRACE},fold=5", 5, "fold=5 must divide the trace's 32 ranks"),
        (f"trace:{TRACE},fold=8", 16, "folded to 8 but the run has 16 ranks: run it with 8"),
        (f"trace:{TRACE}", 8, "or fold it"),
        ("trace:x.txt,fold=2", 2, "fold= needs the trace's own rank count"),
    ],
)
def test_a_bad_fold_is_one_clear_error(spec, p, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        generate(spec, p, 1024)


def test_matrix_file_round_trip(tmp_path):
    d = generate("zipf:0.8", 12, 1 << 30, unit=8)
    path = tmp_path / "m.txt"
    write_matrix(path, d)
    assert np.array_equal(read_matrix(path), d)
    assert np.array_equal(generate(f"file:{path}", 12, 0, unit=8), d)  # size is ignored
    buf = io.StringIO()
    write_matrix(buf, d)
    assert buf.getvalue() == path.read_text()
    big = np.full((2, 2), 2**40 + 7, dtype=np.int64)
    write_matrix(path, big)
    assert np.array_equal(read_matrix(path), big)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty matrix file"),
        ("1 2\n3\n", ":2: row has 1 entries"),
        ("1 2\n3 x\n", ":2: field 2 is 'x'"),
        ("1 -2\n3 4\n", ":1: field 2 is negative"),
        ("1 2 3\n4 5 6\n", "square: 2 rows of 3"),
        ("1.5 2\n3 4\n", ":1: field 1 is '1.5'"),
    ],
)
def test_malformed_matrix_files(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        read_matrix(path)
    assert str(path) in str(err.value)


def test_file_workload_checks_shape_and_unit(tmp_path):
    path = tmp_path / "m.txt"
    write_matrix(path, np.array([[4, 8], [12, 6]]))
    with pytest.raises(UsageError, match="2x2 but the run has 3 ranks"):
        generate(f"file:{path}", 3, 0)
    with pytest.raises(UsageError, match=r"entry \[1\]\[1\] = 6 is not a multiple of the 4-byte"):
        generate(f"file:{path}", 2, 0, unit=4)


def test_expand_workloads():
    assert expand_workloads("zipf:0.1,0.5,0.8") == ["zipf:0.1", "zipf:0.5", "zipf:0.8"]
    assert expand_workloads("zipf:0.1,0.9@7") == ["zipf:0.1@7", "zipf:0.9@7"]
    assert expand_workloads("moe:8,2") == ["moe:8,2"]
    assert expand_workloads("moe:8,2,64,6") == ["moe:8,2", "moe:64,6"]
    assert expand_workloads(f"trace:{TRACE},hidden=7168") == [f"trace:{TRACE},hidden=7168"]
    assert expand_workloads("uniform") == ["uniform"]
    with pytest.raises(UsageError, match="E,K pairs"):
        expand_workloads("moe:8,2,4")
    with pytest.raises(UsageError, match="zipf exponent"):
        expand_workloads("zipf:0.5,x")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gauss", "unknown workload"),
        ("uniform:3", "takes no parameter"),
        ("zipf:7", r"in \[0, 5\]"),
        ("moe:8", "moe needs E,K"),
        ("moe:4,5", "1 <= K <= E"),
        ("hotspot:0", "positive integer"),
        ("perm-sum:x", "must be an integer"),
        ("file:", "give a matrix file"),
        ("trace:x.txt,hidden=0", "positive integer"),
        ("trace:x.txt,width=3", "trace options"),
        ("trace:x.txt,dtype=2", "only makes sense with hidden"),
        ("zipf@x", "seed after '@'"),
    ],
)
def test_parse_errors(spec, message):
    with pytest.raises(UsageError, match=message):
        parse_workload(spec)


def test_generate_argument_errors():
    with pytest.raises(UsageError, match="at least one rank"):
        generate("uniform", 0, 10)
    with pytest.raises(UsageError, match="must not be negative"):
        generate("uniform", 2, -1)
    with pytest.raises(UsageError, match="alignment unit"):
        generate("uniform", 2, 10, unit=0)
    with pytest.raises(UsageError, match="more hot destinations"):
        generate("hotspot:5", 4, 10)


def test_cli_workload_writes_the_matrix(tmp_path, capsys):
    out = tmp_path / "w.txt"
    assert main(["workload", "zipf:0.5@2", "--ranks", "6", "--size", "64K", "--unit", "4",
                 "-o", str(out)]) == 0  # fmt: skip
    assert "wrote" in capsys.readouterr().out
    assert np.array_equal(read_matrix(out), generate("zipf:0.5", 6, 65536, seed=2, unit=4))
    assert main(["workload", "uniform", "--ranks", "2", "--size", "8"]) == 0
    assert capsys.readouterr().out == "4 4\n4 4\n"
    assert main(["workload", "zipf:9", "--ranks", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zipf exponent" in err[0]


def test_expert_zipf_skews_destinations_and_pair_zipf_is_zipf():
    assert np.array_equal(generate("pair-zipf:0.8", 16, 1 << 20, seed=2),
                          generate("zipf:0.8", 16, 1 << 20, seed=2))  # fmt: skip
    d = generate("expert-zipf:0.8", 32, 1 << 20, seed=2)
    assert d.sum() == 32 << 20
    rows, cols = d.sum(axis=1), d.sum(axis=0)
    assert rows.max() / rows.min() < 1.5  # every sender sends about the same
    assert cols.max() / cols.min() > 5  # the hot experts' ranks receive much more
    pair = generate("zipf:0.8", 32, 1 << 20, seed=2)
    assert pair.max() / pair.sum() > 0.03  # pairwise: one pair carries a few % of it all
    assert d.max() / d.sum() < 0.01
    flat = generate("expert-zipf:0.1", 32, 1 << 20, seed=2).sum(axis=0)
    assert flat.max() / flat.min() < cols.max() / cols.min()
    assert expand_workloads("expert-zipf:0.1,0.9") == ["expert-zipf:0.1", "expert-zipf:0.9"]
