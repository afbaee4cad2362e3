"""``warpspec check --reference``: outputs compared with a numpy reference after every run."""

from pathlib import Path

import numpy as np
import pytest

import warpspec
from warpspec.cli import main
from warpspec.emulator.reference import check_against_reference, tolerance
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import OutputMismatchError

from tests.kernels import reference_kernels as kernels_reference

KERNELS = Path(kernels_reference.__file__)
SIZES = ["m_size=64", "n_size=128", "k_size=128"]
REFERENCE = f"{KERNELS}:gemm_reference"


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def check(capsys, *argv):
    code = main(["check", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_right_gemm_matches_the_reference(capsys):
    code, lines, err = check(capsys, f"{KERNELS}:Gemm", *SIZES, "--reference", REFERENCE, "--seeds", "1")
    assert code == 0, err
    assert lines[0].startswith("ok    Gemm  (")
    assert lines[1] == "1 ok (no hazard found, outputs match the reference), 0 failed, 0 skipped"


def test_wrong_transpose_fails_naming_the_output_and_worst_element(capsys):
    code, lines, _ = check(capsys, f"{KERNELS}:GemmWrongTranspose", *SIZES, "--reference", REFERENCE)
    assert code == 1
    assert lines[0].startswith("FAIL  GemmWrongTranspose  OutputMismatchError: output c_ptr[")
    assert "the kernel wrote" in lines[0] and "rtol 0.004, atol 0.004" in lines[0]
    assert f"(against {REFERENCE})" in lines[0]
    assert lines[1] == "0 ok (no hazard found, outputs match the reference), 1 failed, 0 skipped"


def test_without_reference_the_wrong_kernel_is_only_hazard_free(capsys):
    code, lines, _ = check(capsys, f"{KERNELS}:GemmWrongTranspose", *SIZES)
    assert code == 0
    assert lines[-1] == "1 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_tolerances_can_be_overridden(capsys):
    # An atol as large as the wrong product's values accepts it: the option reaches the comparison.
    code, lines, _ = check(capsys, f"{KERNELS}:GemmWrongTranspose", *SIZES, "--reference", REFERENCE,
                           "--atol", "1000")
    assert code == 0, lines


@pytest.mark.parametrize("argv, fragment", [
    (["--reference", f"{KERNELS}:returns_instead"], "returned a ndarray: it should write the expected values"),
    (["--reference", f"{KERNELS}:no_such_function"], f"--reference: {KERNELS} has no function 'no_such_function'"),
    (["--reference", f"{KERNELS}"], "--reference: expected FILE.py:FUNCTION"),
    (["--atol", "1"], "--rtol and --atol set the tolerance of --reference's comparison"),
    (["--reference", REFERENCE, "--rtol", "-1"], "--rtol must be a non-negative number, got -1.0"),
])
def test_reference_usage_errors(capsys, argv, fragment):
    code, _, err = check(capsys, f"{KERNELS}:Gemm", *SIZES, *argv)
    assert code == 2
    assert err.startswith("warpspec check: error: ") and fragment in err
    assert len(err.splitlines()) == 1


def test_a_reference_that_raises_is_named_at_its_line(tmp_path, capsys):
    ref = tmp_path / "ref.py"
    ref.write_text("def broken(a_ptr, c_ptr):\n    c_ptr[...] = a_ptr @ a_ptr\n")
    code, _, err = check(capsys, f"{KERNELS}:Gemm", *SIZES, "--reference", f"{ref}:broken")
    assert code == 2
    assert f"--reference {ref}:broken raised ValueError at {ref}:2: matmul" in err


def test_reference_needing_a_parameter_the_kernel_lacks(tmp_path, capsys):
    ref = tmp_path / "ref.py"
    ref.write_text("def needs(c_ptr, scale):\n    pass\n")
    code, _, err = check(capsys, f"{KERNELS}:Gemm", *SIZES, "--reference", f"{ref}:needs")
    assert code == 2
    assert "reference needs takes scale, which the kernel has no parameter of" in err


def _operands(m=64, n=128, k=128):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    return m, n, k, a, b, np.zeros((m, n), np.float16)


def test_python_api_passes_the_right_kernel_and_writes_in_place():
    m, n, k, a, b, c = _operands()
    with warpspec.use_backend("emulator"):
        check_against_reference(kernels_reference.Gemm(), kernels_reference.gemm_reference, m, n, k, a, b, c)
    expected = (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float32), expected.astype(np.float32), rtol=4e-3, atol=4e-3)


def test_python_api_raises_output_mismatch():
    m, n, k, a, b, c = _operands()
    with warpspec.use_backend("emulator"), pytest.raises(OutputMismatchError, match=r"^output c_ptr\[\d+, \d+\]: "
                                                                                      r"the kernel wrote .* elements "
                                                                                      r"differ$"):
        check_against_reference(kernels_reference.GemmWrongTranspose(), kernels_reference.gemm_reference,
                                m, n, k, a, b, c)


def test_dtype_aware_tolerances():
    assert tolerance("float32") == (1e-4, 1e-4)
    assert tolerance("float16")[0] > tolerance("float32")[0]
    assert tolerance("bfloat16")[0] > tolerance("float16")[0]
    assert tolerance("float8_e4m3")[0] > tolerance("bfloat16")[0]
    assert tolerance("int32") == (0.0, 0.0)
    assert tolerance("float16", rtol=0.5) == (0.5, 4e-3)
