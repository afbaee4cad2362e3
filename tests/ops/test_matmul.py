"""``warpspec.ops.matmul`` on the emulator (numpy arrays): every dtype, b layout, epilogue and output dtype at a
small and a ragged shape against numpy, and every argument error.

References are computed in float32 from the (already rounded) inputs, the epilogue in float32 too; the kernel
accumulates in float32 in another order and rounds once to the output dtype, so the tolerance is a few units of
the output dtype's precision relative to the value (plus the same absolute amount near zero).
"""

import importlib
import json
import stat
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import warpspec
from warpspec import ArgumentError, ops
from warpspec.dtypes import BY_NAME, bfloat16
from warpspec.ops import kernels
from warpspec.ops.frame import Signatures

ops_matmul = importlib.import_module("warpspec.ops.matmul")  # the module (``ops.matmul`` is the function)

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
SHAPES = [(96, 80, 64), (72, 40, 48)]  # the second: no size a multiple of any tile
#: Input dtype -> output dtypes (the default first).
OUTPUTS = {np.float16: [np.float16, np.float32], BF16: [BF16, np.float32], E4M3: [BF16, np.float16, np.float32]}
EPILOGUES = [(False, None), (True, None), (False, "relu"), (True, "relu"), (True, "gelu"), (False, "silu")]
#: Relative precision of each output dtype (one unit in the last place at 1.0).
PRECISION = {np.dtype(np.float16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7, np.dtype(np.float32): 2.0 ** -20}


def f32(x):
    return np.asarray(x).astype(np.float32)


def operands(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    scale = 1.0 if dtype != E4M3 else 4.0  # float8 values spread over more of e4m3's range
    a = (rng.standard_normal((m, k)) * scale).astype(dtype)
    w = (rng.standard_normal((n, k)) * scale).astype(dtype)
    return a, w


def reference(a, b, bias=None, activation=None, scale=1.0):
    result = np.float32(scale) * (f32(a) @ f32(b))
    if bias is not None:
        result = result + f32(bias)
    if activation == "relu":
        result = np.maximum(result, 0)
    elif activation == "gelu":  # the tanh approximation
        result = 0.5 * result * (1 + np.tanh(np.sqrt(2 / np.pi) * (result + 0.044715 * result ** 3)))
    elif activation == "silu":
        result = result / (1 + np.exp(-result))
    return result


def assert_close(result, expected, out_dtype):
    assert result.dtype == np.dtype(out_dtype)
    tolerance = 4 * PRECISION[np.dtype(out_dtype)]
    error = np.abs(f32(result) - expected)
    assert np.all(error <= tolerance * (np.abs(expected) + 1)), float(error.max())


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["w.T", "row-major"])
def test_sixteen_bit_inputs_match_numpy(m, n, k, dtype, layout):
    a, w = operands(m, n, k, dtype)
    b = w.T if layout == "w.T" else np.ascontiguousarray(w.T)
    for out_dtype in OUTPUTS[dtype]:
        bias = np.random.default_rng(3).standard_normal(n).astype(out_dtype)
        for has_bias, activation in EPILOGUES:
            result = ops.matmul(a, b, bias=bias if has_bias else None, activation=activation,
                                out_dtype=None if out_dtype is dtype else out_dtype)
            assert isinstance(result, np.ndarray) and result.shape == (m, n)
            assert_close(result, reference(a, b, bias if has_bias else None, activation), out_dtype)


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_float8_inputs_match_numpy(m, n, k):
    a, w = operands(m, n, k, E4M3)
    scale_a, scale_b = 0.5, np.array([0.25], dtype=np.float32)
    for out_dtype in OUTPUTS[E4M3]:
        bias = np.random.default_rng(3).standard_normal(n).astype(out_dtype)
        for has_bias, activation in EPILOGUES:
            result = ops.matmul(a, w.T, bias=bias if has_bias else None, activation=activation,
                                out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b)
            expected = reference(a, w.T, bias if has_bias else None, activation, scale=0.125)
            assert_close(result, expected, out_dtype)
    assert ops.matmul(a, w.T, scale_a=1.0, scale_b=1.0).dtype == np.dtype(BF16)  # bf16 by default


def test_strided_views_and_out():
    """a and b as column slices of wider arrays (pitch > K, > N), written into a slice of a wider out."""
    m, n, k = 72, 40, 48
    a_wide, w = operands(m, n, k + 16, np.float16)
    a = a_wide[:, :k]
    b_wide = np.ascontiguousarray(np.concatenate([w[:, :k].T, np.ones((k, 8), np.float16)], axis=1))
    b = b_wide[:, :n]
    out_wide = np.full((m, n + 24), 7.0, dtype=np.float16)
    out = out_wide[:, :n]
    assert ops.matmul(a, b, out=out) is out
    assert_close(out, reference(a, b), np.float16)
    assert np.all(out_wide[:, n:] == 7.0)  # the pitch, not the width, separates rows


def test_empty_result_launches_nothing(monkeypatch):
    monkeypatch.setattr(ops_matmul, "run", lambda *args: pytest.fail("an empty result launched a kernel"))
    a, w = operands(0, 40, 48, np.float16)
    result = ops.matmul(a, w.T)
    assert result.shape == (0, 40) and result.dtype == np.float16


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("dtype, out_dtype", [(np.float16, np.float16), (BF16, np.float32)], ids=["f16", "bf16-f32"])
def test_an_empty_sum_is_the_epilogue_of_zero_without_a_kernel(monkeypatch, activation, dtype, out_dtype):
    """K = 0, as torch.addmm takes it: every element sums no products, so the result is activation(bias) in each
    row (zeros without a bias), written without a kernel (TMA has no empty extent), into out= as well."""
    monkeypatch.setattr(ops_matmul, "run", lambda *args: pytest.fail("an empty sum launched a kernel"))
    a, w = operands(5, 24, 0, dtype)
    bias = np.linspace(-3, 3, 24).astype(out_dtype)
    result = ops.matmul(a, w.T, bias=bias, activation=activation, out_dtype=out_dtype)
    assert_close(result, reference(a, w.T, bias, activation), out_dtype)
    out = np.full((5, 24), np.nan, out_dtype)
    assert ops.matmul(a, w.T, activation=activation, out=out) is out and not f32(out).any()


def test_import_needs_no_torch():
    code = "import sys; import warpspec.ops; print('torch' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


# ----------------------------------------------------------------------------------------------- errors


def errors_of(call):
    with pytest.raises(ArgumentError) as error:
        call()
    return str(error.value)


A, W = operands(96, 80, 64, np.float16)


@pytest.mark.parametrize("call, fragment", [
    (lambda: ops.matmul(A[0], W.T), "a must be 2-D, got shape (64,)"),
    (lambda: ops.matmul(A, W.T[None]), "b must be 2-D, got shape (1, 64, 80)"),
    (lambda: ops.matmul(A, W.T[:32]), "b has 32 rows but a has 64 columns"),
    (lambda: ops.matmul(A.astype(np.float32), W.T), "a has dtype float32; ops.matmul takes float16, bfloat16"),
    (lambda: ops.matmul(A, W.T.astype(BF16)), "b has dtype bfloat16 but a has float16"),
    (lambda: ops.matmul([[1.0]], W.T), "a must be a numpy array or a torch tensor, got list"),
    (lambda: ops.matmul(A, "b"), "b must be a numpy array or a torch tensor, got str"),
    (lambda: ops.matmul(A, None), "b must be a numpy array or a torch tensor, got NoneType"),
    (lambda: ops.matmul(A, W.T, activation="tanh"), "activation must be one of None, 'relu', 'gelu', 'silu'"),
    (lambda: ops.matmul(A, W.T, bias=np.zeros(79, np.float16)), "bias must have shape (80,)"),
    (lambda: ops.matmul(A, W.T, bias=np.zeros(80, np.float32)), "bias has dtype float32; it must have the "
                                                                  "output dtype, float16"),
    (lambda: ops.matmul(A, W.T, bias=np.zeros(160, np.float16)[::2]), "bias must be contiguous"),
    (lambda: ops.matmul(A, W.T, out_dtype=np.int32), "out_dtype <class 'numpy.int32'> is not supported for "
                                                     "float16 inputs; use one of float16, float32"),
    (lambda: ops.matmul(A, W.T, out_dtype="bfloat16"), "out_dtype 'bfloat16' is not supported"),
    (lambda: ops.matmul(A, W.T, out=np.zeros((96, 81), np.float16)), "out must have shape (96, 80)"),
    (lambda: ops.matmul(A, W.T, out=np.zeros((96, 80), BF16)), "out has dtype bfloat16; for float16 inputs it "
                                                                 "must be one of float16, float32"),
    (lambda: ops.matmul(A, W.T, out=np.zeros((96, 80), np.float16), out_dtype="float32"),
     "out has dtype float16 but out_dtype is float32"),
    (lambda: ops.matmul(A, W.T, out=np.zeros((80, 96), np.float16).T), "out must be row-major"),
    (lambda: ops.matmul(A, W.T, out=[[0.0]]), "out must be a numpy array or a torch tensor, got list"),
    (lambda: ops.matmul(A, W.T, scale_a=1.0), "scale_a is for float8 inputs only; a is float16"),
])
def test_argument_errors_name_the_argument(call, fragment):
    assert fragment in errors_of(call)


@pytest.mark.parametrize("a, b", [
    (np.repeat(A, 2, axis=1)[:, ::2], W.T),  # a strided view: every other column of a wider array
    (A, np.repeat(W.T, 2, axis=1)[:, ::2]),
    (np.broadcast_to(A[:1], A.shape), W.T),  # a broadcast a: every row one row (row stride 0)
    (A, np.broadcast_to(W.T[:, :1], (64, 80))),  # a broadcast b: every column one column
    (A[::-1], W.T[:, ::-1]),  # reversed numpy views
    (np.asfortranarray(A)[:, ::-1], W.T)])  # column-major and reversed: no unit stride at all
def test_strided_broadcast_and_reversed_operands_are_multiplied_from_row_major_copies(a, b):
    """Operands torch and numpy accept whatever their strides: where neither a row nor a column is contiguous
    with a positive pitch, ops.matmul multiplies a row-major copy (the same staging as a padded pitch)."""
    assert_close(ops.matmul(a, b), reference(a, b), np.float16)


A8, W8 = operands(96, 80, 64, E4M3)


@pytest.mark.parametrize("call, fragment", [
    (lambda: ops.matmul(A8, np.ascontiguousarray(W8.T), scale_a=1.0, scale_b=1.0),
     "b: float8 b must be the transposed view of a K-major [N, K] tensor (w.T), as torch._scaled_mm requires"),
    (lambda: ops.matmul(A8, W8.T, scale_b=1.0), "scale_a is required for float8 inputs"),
    (lambda: ops.matmul(A8, W8.T, scale_a=1.0), "scale_b is required for float8 inputs"),
    (lambda: ops.matmul(A8, W8.T, scale_a=np.ones(2, np.float32), scale_b=1.0),
     "scale_a must be a one-element float32 array/tensor, got dtype float32 and shape (2,)"),
    (lambda: ops.matmul(A8, W8.T, scale_a=1.0, scale_b=np.ones(1, np.float16)),
     "scale_b must be a one-element float32 array/tensor, got dtype float16"),
    (lambda: ops.matmul(A8, W8.T, scale_a="2", scale_b=1.0), "scale_a must be a Python float or a one-element"),
    (lambda: ops.matmul(A8, W8.T, scale_a=1.0, scale_b=1.0, bias=np.zeros(80, np.float16)),
     "bias has dtype float16; it must have the output dtype, bfloat16"),
])
def test_float8_argument_errors(call, fragment):
    assert fragment in errors_of(call)


def test_misaligned_base_address_is_refused():
    storage = np.zeros(96 * 64 + 8, dtype=np.float16)
    offset = (-storage.__array_interface__["data"][0] // 2) % 8 + 1  # one element past a 16-byte boundary
    a = storage[offset:offset + 96 * 64].reshape(96, 64)
    assert "a starts at an address that is not a multiple of 16 bytes" in errors_of(lambda: ops.matmul(a, W.T))


# ------------------------------------------------------------------------------------------ schedules


@pytest.fixture
def tile_walk(monkeypatch):
    """Small problems run the tile walk's family (``Gemm``) instead of the split family, whose schedules are
    tested in tests/ops/test_split_gemm.py: the schedule mechanics these tests check are the same for both."""
    monkeypatch.setattr(ops_matmul, "SPLIT_FAMILY_M", 0)
    monkeypatch.setattr(ops_matmul, "SPLIT_FAMILY_TILES", 0)
    monkeypatch.setattr(ops_matmul, "_chosen", {})
    monkeypatch.setattr(ops_matmul, "_signatures", Signatures())


def problem(m, n, k, dtype=warpspec.float16, has_bias=False):
    return ops_matmul.Problem(m, n, k, dtype, ops_matmul.OUT_DTYPES[dtype][0], True, has_bias, None)


def test_heuristic_uses_small_tiles_for_small_problems_and_v6_tiles_for_large():
    for small in (problem(96, 80, 64), problem(300, 80, 64)):  # at most one wave of tiles: the split family
        assert ops_matmul.heuristic_schedule(small) == ops_matmul.split_schedule(small)
    assert ops_matmul.heuristic_schedule(problem(20000, 80, 64)) == \
        {"num_stages": 2, "block_m": 128, "block_n": 64, "persistent": False, "stream_k": False}
    assert ops_matmul.heuristic_schedule(problem(8192, 8192, 8192)) == \
        {"num_stages": 3, "block_m": 128, "block_n": 256, "persistent": True,
         "stream_k": True}
    assert ops_matmul.heuristic_schedule(problem(20000, 100, 8192, warpspec.float8_e4m3)) == \
        {"num_stages": 4, "block_m": 128, "block_n": 64, "persistent": False, "stream_k": False}


def test_shipped_defaults_win_over_the_heuristic(monkeypatch, tmp_path, tile_walk):
    table = {"float16": {"128x128x64": {"num_stages": 3, "block_m": 64, "block_n": 128, "persistent": True,
                                        "stream_k": False}}}
    path = tmp_path / "defaults.json"
    ops_matmul.write_defaults(table, path)
    ops_matmul.write_defaults({"bfloat16": {"1x1x1": {"num_stages": 2, "block_m": 64, "block_n": 64,
                                                      "persistent": False, "stream_k": False}}}, path)
    monkeypatch.setattr(ops_matmul, "DEFAULTS_FILE", path)
    monkeypatch.setattr(ops_matmul, "_defaults", None)
    assert set(ops_matmul.shipped_defaults()) == {"float16", "bfloat16"}  # merged, not replaced
    chosen = ops_matmul.choose_schedule(problem(96, 80, 64), (), on_gpu=False)
    assert chosen == table["float16"]["128x128x64"]
    # M 300 (bucket 512) with the same N and K buckets: the nearest M bucket's default
    assert ops_matmul.choose_schedule(problem(300, 80, 64), (), on_gpu=False) == table["float16"]["128x128x64"]
    assert ops_matmul.choose_schedule(problem(300, 80, 200), (), on_gpu=False) == \
        ops_matmul.heuristic_schedule(problem(300, 80, 200))  # another K bucket: not shipped


def tile(block_n, persistent=False, stream_k=False, block_m=128, num_stages=4):
    return {"num_stages": num_stages, "block_m": block_m, "block_n": block_n, "persistent": persistent,
            "stream_k": stream_k}


def split(block_m, block_n, split_k=1, num_stages=8):
    return {"num_stages": num_stages, "block_m": block_m, "block_n": block_n, "split_k": split_k, "swap_ab": False}


@pytest.mark.parametrize("order", ["224 below", "224 above"])
def test_an_untuned_m_takes_the_neighbouring_default_that_fills_the_last_wave_best(monkeypatch, order):
    """512 x 14336 x 4096 (the tile walk) between tuned M 256 and 1024: 128 x 224 tiles make 256 tiles (two
    waves of 132 SMs, 97% full), 128 x 176 tiles 328 (three, 83% full); the nearer side does not decide."""
    wide, narrow = tile(224), tile(176, persistent=True)
    below, above = (wide, narrow) if order == "224 below" else (narrow, wide)
    monkeypatch.setattr(ops_matmul, "_defaults", {"bfloat16": {"256x16384x4096": below, "1024x16384x4096": above,
                                                               "512x8192x4096": tile(64)}})
    big = problem(512, 14336, 4096, warpspec.bfloat16)
    assert not big.split_family
    assert ops_matmul.wave_fill(big, wide) == pytest.approx(256 / 264)
    assert ops_matmul.wave_fill(big, narrow) == pytest.approx(328 / 396)
    assert ops_matmul.wave_fill(big, tile(176, persistent=True, stream_k=True)) == 1.0
    assert ops_matmul.choose_schedule(big, (), on_gpu=False) == wide


def test_a_neighbour_of_the_other_family_or_a_split_family_problem_takes_the_size_rule(monkeypatch):
    """A tile-walk problem skips a neighbour's split-family schedule (another kernel's) for the next one of its
    own; a split-family problem takes its size rule, never a neighbour's tiles (they lost to it on the GPU)."""
    walk = tile(192, persistent=True)
    monkeypatch.setattr(ops_matmul, "_defaults", {"bfloat16": {
        "256x8192x4096": split(128, 96), "2048x8192x4096": walk,
        "64x4096x4096": split(64, 32), "256x4096x4096": split(128, 64)}})
    big = problem(512, 6144, 4096, warpspec.bfloat16)
    assert ops_matmul.choose_schedule(big, (), on_gpu=False) == walk
    small = problem(128, 4096, 4096, warpspec.bfloat16)
    assert small.split_family
    assert ops_matmul.choose_schedule(small, (), on_gpu=False) == ops_matmul.split_schedule(small)
    alone = problem(512, 6144, 2048, warpspec.bfloat16)  # K bucket 2048: no entry of its N and K
    assert ops_matmul.choose_schedule(alone, (), on_gpu=False) == ops_matmul.heuristic_schedule(alone)


def test_concurrent_writers_of_the_defaults_keep_each_others_entries(tmp_path):
    """Six writers merge ten tables each into one defaults file at once: every entry is there at the end (each
    writer read the file after the last one's write) and the file was never half written."""
    path = tmp_path / "defaults.json"
    schedule = {"num_stages": 2, "block_m": 64, "block_n": 64, "persistent": False, "stream_k": False}

    def write(writer):
        for i in range(10):
            ops_matmul.write_defaults({"float16": {f"{writer}x{i}x1": schedule}}, path)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    written = json.loads(path.read_text())["schedules"]["float16"]
    assert sorted(written) == sorted(f"{w}x{i}x1" for w in range(6) for i in range(10))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_writing_the_defaults_keeps_the_files_permissions_and_refuses_another_file(tmp_path):
    path = tmp_path / "defaults.json"
    path.write_text('{"schedules": {}}\n')
    path.chmod(0o644)
    ops_matmul.write_defaults({"float16": {}}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a package file others read stays readable
    path.write_text('["not", "defaults"]')
    with pytest.raises(ValueError, match="is not a table of shipped defaults"):
        ops_matmul.write_defaults({"float16": {}}, path)
    assert path.read_text() == '["not", "defaults"]'


@pytest.mark.parametrize("text, message", [
    ('{"schedules": {"float16": {"128x128x64": {"num_stages": 3, "blockm": 64}}}}',
     "the float16 entry 128x128x64 is {'num_stages': 3, 'blockm': 64}, which is not a schedule of its kernel "
     "(SplitGemm: keys block_m, block_n, num_stages, split_k, swap_ab)"),
    ("{not json", "is not JSON (Expecting property name"),
    ('{"schedules": {"float16": [1]}}', 'is not a table of shipped defaults ({"schedules": {dtype: {"MxNxK": '
                                       'schedule}}})'),
])
def test_a_broken_defaults_file_is_an_error_naming_it(text, message, monkeypatch, tmp_path):
    """A defaults file edited into something warpspec does not write: a DefaultsFileError naming the file (and the
    entry) and how to restore it, at the first call that reads it, never a raw parse or keyword error."""
    from warpspec.errors import DefaultsFileError

    path = tmp_path / "defaults.json"
    path.write_text(text)
    monkeypatch.setattr(ops_matmul, "DEFAULTS_FILE", path)
    monkeypatch.setattr(ops_matmul, "_defaults", None)
    monkeypatch.setattr(ops_matmul, "_chosen", {})
    monkeypatch.setattr(ops_matmul, "_signatures", Signatures())
    a, b = np.ones((96, 64), np.float16), np.ones((64, 80), np.float16)
    with pytest.raises(DefaultsFileError) as raised:
        ops.matmul(a, b)
    assert str(raised.value).startswith(str(path))
    assert message in str(raised.value)
    assert str(raised.value).endswith("restore it from the warpspec package, or rewrite its entries with warpspec "
                                      "tune --write-defaults")


def test_the_shipped_defaults_file_holds_valid_schedules():
    for dtype_name, schedules in ops_matmul.shipped_defaults().items():
        dtype = BY_NAME[dtype_name]
        valid = {split: kernels.gemm_class(dtype, split)(dtype, dtype if dtype.nbytes == 2 else bfloat16,
                                                         b_k_major=True, has_bias=False, activation=None).schedules()
                 for split in (False, True)}
        keys = {False: {"num_stages", "block_m", "block_n", "persistent", "stream_k"},
                True: {"num_stages", "block_m", "block_n", "swap_ab", "split_k"}}
        assert all(valid[split] and all(set(s) == keys[split] for s in valid[split]) for split in valid)
        for bucket, schedule in schedules.items():
            m, n, k = (int(x) for x in bucket.split("x"))  # the buckets of M and N name the family
            split = ops_matmul.Problem(m, n, k, dtype, dtype, True, False, None).split_family
            assert schedule in valid[split], (dtype_name, bucket, schedule)


def test_parse_shapes():
    assert ops_matmul.parse_shapes("8192x8192x8192, 4096X14336x4096") == [(8192, 8192, 8192), (4096, 14336, 4096)]
    for text in ("8192x8192", "8192x0x8", "axbxc"):
        with pytest.raises(ArgumentError, match="is not MxNxK with positive integers"):
            ops_matmul.parse_shapes(text)


def test_tune_command_refuses_bad_shapes_and_a_missing_gpu(capsys):
    from warpspec.cli import main

    assert main(["tune", "--op", "matmul", "--shapes", "8192x8192"]) == 2
    assert "warpspec tune: error: shapes: '8192x8192' is not MxNxK" in capsys.readouterr().err
    with warpspec.use_backend("emulator"):
        assert main(["tune", "--shapes", "256x256x256", "--dtype", "bfloat16"]) == 2
    assert "tuning needs a Hopper GPU" in capsys.readouterr().err
    assert main(["tune", "--shapes", "256x256x256", "--dtype", "float32"]) == 2
    assert "invalid choice: 'float32'" in capsys.readouterr().err
    assert main(["tune", "--shapes", "256x256x256", "--runs", "0"]) == 2
    assert "warpspec tune: error: --runs must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("dtype, layout", [(np.float16, "w.T"), (BF16, "row-major"), (E4M3, "w.T")],
                         ids=["float16", "bfloat16-row-major", "float8"])
def test_every_schedule_matches_numpy_with_blocks_walking_several_tiles(dtype, layout, tile_walk):
    """Each schedule of the tile walk pinned, with 3 SMs' worth of blocks: persistent blocks walk several tiles
    (ragged ones included) and store through the shared buffer; the others take one tile each. (Without the
    ``tile_walk`` fixture this small problem would take the split family, tested in test_split_gemm.py.)"""
    m, n, k = 200, 136, 96
    a, w = operands(m, n, k, dtype)
    b = w.T if layout == "w.T" else np.ascontiguousarray(w.T)
    out_dtype = OUTPUTS[dtype][0]
    bias = np.random.default_rng(3).standard_normal(n).astype(out_dtype)
    scale = np.array([0.5], np.float32) if dtype == E4M3 else None
    out = np.zeros((m, n), out_dtype)
    problem = ops_matmul.validate(a, b, bias, "gelu", out, None)
    expected = reference(a, b, bias, "gelu", scale=0.5 if dtype == E4M3 else 1.0)
    tuned = ops_matmul.tuned_script(problem)
    assert not tuned.cls.split_family
    ran = 0
    with warpspec.use_backend("emulator"):
        for schedule in tuned.schedules():
            out[:] = np.nan
            try:
                tuned.instantiate(schedule)(*ops_matmul.arguments(a, b, out, bias, scale, problem)[:-1], 3)
            except warpspec.CompileError as error:
                assert "fit in a block" in str(error), (schedule, error)  # too many stages of large tiles
                continue
            assert_close(out, expected, out_dtype)
            ran += 1
    assert ran >= 30


def test_a_repeated_call_reuses_its_validation_and_a_bad_one_is_still_refused():
    first = ops_matmul.validate(A, W.T, None, "relu", None, None)
    assert ops_matmul.validate(A, W.T, None, "relu", None, None) is first
    assert "bias must have shape (80,)" in errors_of(lambda: ops.matmul(A, W.T, bias=np.zeros(79, np.float16)))
    assert "activation must be one of" in errors_of(lambda: ops.matmul(A, W.T, activation=["relu"]))


@pytest.mark.parametrize("dtype, out_dtype", [(warpspec.float16, warpspec.float16),
                                              (warpspec.bfloat16, warpspec.float32),
                                              (warpspec.float8_e4m3, warpspec.bfloat16)])
def test_the_heuristic_schedule_of_a_large_problem_builds(dtype, out_dtype):
    """Its shared memory fits (a float32 output's epilogue buffer included) for every dtype."""
    big = ops_matmul.Problem(8192, 8192, 8192, dtype, out_dtype, True, True, "gelu")
    script = ops_matmul.tuned_script(big).instantiate(ops_matmul.heuristic_schedule(big))
    kernel = warpspec.runtime.kernel_for(script, {})
    assert kernel.facts is not None


class StoredWinnerBench:
    """The GPU's identity for tuning keys, without a GPU (nothing is timed or launched here)."""

    def identity(self):
        return {"gpu": "Fake H200", "compute_capability": "9.0", "driver": 13000}


def test_a_stored_winner_wins_on_the_gpu_and_serves_the_epilogue_variants(tmp_path, monkeypatch, tile_walk):
    from dataclasses import asdict

    from warpspec.frontend.kernel import bind_arguments
    from warpspec.tune import cache, tuner

    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuner.settings, "bench", StoredWinnerBench())
    plain = ops_matmul.validate(A, W.T, None, None, None, None)
    out = np.zeros((96, 80), np.float16)
    args = ops_matmul.arguments(A, W.T, out, None, None, plain)
    tuned = ops_matmul.tuned_script(plain)
    assert tuner.stored_schedule(tuned, args, {}) is None
    assert ops_matmul.choose_schedule(plain, args, on_gpu=True) == ops_matmul.heuristic_schedule(plain)
    winner = {"num_stages": 3, "block_m": 128, "block_n": 64, "persistent": True, "stream_k": False}
    runtime_args, compile_time = bind_arguments(tuned.cls, args, {})
    material = tuner.tuning_material(tuned, runtime_args, compile_time, StoredWinnerBench().identity())
    fate = tuner.ScheduleFate(winner, "winner", time_ms=1.0)
    cache.store(cache.entry_key(material), material, {"kernel": tuned.cls.__name__, "seconds": 1.0,
                                                       "fates": [asdict(fate)]})
    assert tuner.stored_schedule(tuned, args, {}) == winner
    assert ops_matmul.choose_schedule(plain, args, on_gpu=True) == winner
    bias = np.zeros(80, np.float16)
    with_bias = ops_matmul.validate(A, W.T, bias, "gelu", None, None)
    bias_args = ops_matmul.arguments(A, W.T, out, bias, None, with_bias)
    assert ops_matmul.choose_schedule(with_bias, bias_args, on_gpu=True) == winner  # the plain kernel's winner
    assert ops_matmul.choose_schedule(with_bias, bias_args, on_gpu=False) == ops_matmul.heuristic_schedule(plain)


def test_a_shipped_default_that_cannot_build_for_the_output_dtype_falls_back(monkeypatch, tile_walk):
    """A float16 default whose stages leave no room for a float32 output's epilogue buffer (128 KB): the size
    rule's schedule runs instead, and the result is right."""
    too_big = {"num_stages": 3, "block_m": 128, "block_n": 256, "persistent": True, "stream_k": False}
    monkeypatch.setattr(ops_matmul, "_defaults", {"float16": {"128x128x64": too_big}})
    monkeypatch.setattr(ops_matmul, "_chosen", {})
    monkeypatch.setattr(ops_matmul, "_signatures", Signatures())
    wide = ops_matmul.validate(A, W.T, None, None, None, np.float32)
    assert ops_matmul.choose_schedule(wide, (), on_gpu=False) == too_big
    with pytest.raises(warpspec.CompileError, match="shared memory"):
        warpspec.runtime.kernel_for(ops_matmul.tuned_script(wide).instantiate(too_big), {})
    result = ops.matmul(A, W.T, out_dtype=np.float32)
    assert_close(result, reference(A, W.T), np.float32)
    assert ops_matmul.chosen_schedule(wide) == ops_matmul.heuristic_schedule(wide)
