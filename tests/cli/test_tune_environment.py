"""``warpspec tune`` with ``WARPSPEC_BACKEND=cuda`` on a machine without a GPU: a one-line usage error."""

from warpspec.cli import main


def test_cuda_backend_without_a_gpu_is_a_usage_error(capsys, monkeypatch):
    import warpspec.cuda.driver

    monkeypatch.setenv("WARPSPEC_BACKEND", "cuda")
    monkeypatch.setattr(warpspec.cuda.driver, "has_hopper_gpu", lambda *args: False)
    code = main(["tune", "--shapes", "64x64x64"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == ["warpspec tune: error: tuning needs a Hopper GPU, and none was found "
                                "(WARPSPEC_BACKEND=cuda selects the CUDA back end, but there is no driver or no "
                                "Hopper device)"]
