"""``warpspec check`` on kernels that hand data between blocks through flags: the random inputs it makes are zeros
in the flag arrays, so a correct hand-off passes under every seed and a wrong one fails for its own reason (the
read it does not order), not for flags that already held a value when the launch began."""

from pathlib import Path

import numpy as np
import pytest

from tests.kernels import flag_kernels
from warpspec.cli import main
from warpspec.cli.inputs import pointer_arrays
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.frontend.kernel import parameters

FLAGS = Path(flag_kernels.__file__)


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def check(capsys, kernel, *argv):
    code = main(["check", f"{FLAGS}:{kernel}", "blocks=4", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_the_flag_array_is_zeros_and_the_data_random():
    arrays = pointer_arrays(flag_kernels.RunningSum(), parameters(flag_kernels.RunningSum), {"blocks": 4})
    np.testing.assert_array_equal(arrays["flags_ptr"], np.zeros(4, np.int32))
    assert arrays["flags_ptr"].dtype == np.int32
    assert np.count_nonzero(arrays["x_ptr"]) == arrays["x_ptr"].size == 4 * 16 * 64


def test_a_correct_hand_off_passes_with_random_inputs(capsys):
    code, lines, err = check(capsys, "RunningSum", "--seeds", "4")
    assert code == 0, (lines, err)
    assert lines[0].startswith("ok    RunningSum  (") and lines[0].endswith(" s, 1+4 runs)")


@pytest.mark.parametrize("kernel, reason", [
    ("SignalBeforeSync", "a flag.wait of this block, before this access, that passed on a flag.signal the other "
                         "block made after its access"),
    ("ReadWithoutWait", "to hand data from one block to a later one, use self.flag.signal and self.flag.wait"),
])
def test_a_wrong_hand_off_fails_for_its_own_reason(capsys, kernel, reason):
    code, lines, _ = check(capsys, kernel, "--seeds", "2")
    assert code == 1
    verdict = lines[0]
    assert verdict.startswith(f"FAIL  {kernel}  RaceError: {FLAGS}:{flag_kernels.marker_line('read')}: load_global "
                              f"in block (1, 0, 0) reads ws[8, 0] (argument 'ws_ptr'), which block (0, 0, 0) wrote")
    assert reason in verdict
    assert "already held" not in "\n".join(lines)
