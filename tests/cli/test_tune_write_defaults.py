"""``warpspec tune --write-defaults`` when the defaults file cannot be written: the winners are printed first, then
one error line naming the file and the reason, exit code 1, never a traceback. The GPU, the tuning and the write
are stand-ins; the winners' table is what ``tune_matmul`` returns."""

import importlib
import json

from warpspec.cli import main

ops_matmul = importlib.import_module("warpspec.ops.matmul")  # the module (``ops.matmul`` is the function)

TABLE = {"float16": {"64x64x64": {"num_stages": 2, "block_m": 64, "block_n": 64, "persistent": False,
                                  "stream_k": False}}}


def test_a_defaults_file_that_cannot_be_written_is_one_error_after_the_winners(capsys, monkeypatch):
    import warpspec.cuda.driver
    import warpspec.runtime
    import warpspec.tune.tuner

    def refuse(table):
        raise PermissionError(13, "Permission denied", str(ops_matmul.DEFAULTS_FILE))

    monkeypatch.setattr(warpspec.runtime, "get_backend", lambda: "cuda")
    monkeypatch.setattr(warpspec.cuda.driver, "has_hopper_gpu", lambda *args: True)
    monkeypatch.setattr(warpspec.tune.tuner, "configure", lambda **settings: None)
    monkeypatch.setattr(ops_matmul, "tune_matmul", lambda shapes, dtype, **options: TABLE)
    monkeypatch.setattr(ops_matmul, "write_defaults", refuse)
    code = main(["tune", "--shapes", "64x64x64", "--write-defaults"])
    out, err = capsys.readouterr()
    assert code == 1
    assert json.loads(out) == TABLE
    assert err.splitlines() == [f"warpspec tune: error: could not merge the winners into {ops_matmul.DEFAULTS_FILE}: "
                                f"Permission denied (they are stored in the tuning cache, and printed above)"]
