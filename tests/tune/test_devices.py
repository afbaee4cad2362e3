"""Tuned winners per device without a GPU: two fake GPUs of one name whose SM counts differ (0: 132 SMs, where tile
128 wins; 1: 114 SMs, where tile 64 wins), launches onto the fake device side of launch plans. A call tunes on its
arrays' GPU (identity and timing asked with that GPU current), and a winner of one GPU never serves the other,
neither in the process nor from the disk cache."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import pytest

from warpspec.cuda import driver
from warpspec.runtime import run_script
from warpspec.tune import bench as bench_module
from warpspec.tune import cache, tuner

from ..cuda.test_launch_plan import BASE, TunedProbe, array, good, side  # noqa: F401 - side: a fixture

GPUS = {0: {"gpu": "Fake H200", "compute_capability": "9.0", "multiprocessors": 132, "driver": 13000},
        1: {"gpu": "Fake H200", "compute_capability": "9.0", "multiprocessors": 114, "driver": 13000}}
WINS = {0: 128, 1: 64}  # the tile height that is fastest on each GPU


class TwoGpuBench:
    """Identity and timing of the current device (as the real bench reads them), the real launch."""

    def __init__(self):
        self.identities, self.timings = [], []

    def identity(self):
        device = driver.default_device()
        self.identities.append(device)
        return GPUS[device]

    @contextmanager
    def timing(self):
        def measure(kernel, runtime, built):
            device = driver.default_device()
            tile = dict(kernel.constants)["tile_m"]
            self.timings.append((device, tile))
            return 1.0 if tile == WINS[device] else 2.0

        yield measure

    def launch(self, script, args, kwargs):
        run_script(script, args, kwargs)


def torch_without_cuda(monkeypatch) -> None:
    """``driver.default_device`` asks an imported torch first: make it answer as a process whose CUDA is not
    initialised, so the current device is ``use_device``'s, else 0 (without torch it is that already)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)


@pytest.fixture
def two_gpus(side, monkeypatch, tmp_path):
    torch_without_cuda(monkeypatch)
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    for name, value in vars(tuner.settings).items():
        monkeypatch.setattr(tuner.settings, name, value)
    monkeypatch.setattr(tuner, "compile_cuda", lambda source: tuner.CompiledModule(b"", "", "fake", False))
    bench = TwoGpuBench()
    tuner.configure(bench=bench, workers=1)
    return bench


def on(device: int) -> tuple:
    return tuple(good(src_ptr=array((128, 64), device=device),
                      dst_ptr=array((128, 64), device=device, pointer=BASE + 2**20)).values())


def test_each_gpu_gets_its_own_winner_whatever_the_current_device(two_gpus, side, tmp_path):
    kernel = TunedProbe()
    kernel(*on(0))
    assert kernel.last_report.winner.schedule == {"tile_m": 128} and side.launches[-1].function == 0xF00
    kernel(*on(1))  # the current device is 0: the call tunes on GPU 1, its arrays'
    assert two_gpus.identities == [0, 1]
    assert sorted(set(two_gpus.timings)) == [(0, 64), (0, 128), (1, 64), (1, 128)]
    assert kernel.last_report.winner.schedule == {"tile_m": 64}
    assert side.launches[-1].function == 0xF01 and side.launches[-1].grid == (2, 1, 1)  # 128 rows, tile 64
    assert driver.default_device() == 0
    # Later calls find each GPU's winner (the guards and keys include the arrays' GPU): nothing is tuned again.
    timed = len(two_gpus.timings)
    for device in (0, 1, 1, 0):
        kernel(*on(device))
        assert side.launches[-1].function == 0xF00 + device
        assert side.launches[-1].grid == ((1, 1, 1) if device == 0 else (2, 1, 1))
        assert kernel.last_report.winner.schedule == {"tile_m": WINS[device]}
    assert len(two_gpus.timings) == timed and two_gpus.identities == [0, 1]
    # Two records on disk, one per GPU identity.
    records = sorted(p.name for p in (tmp_path / cache.TUNING_KIND).rglob("*") if p.is_file())
    assert len(records) == 2


def test_a_stored_winner_of_another_gpu_is_not_served(two_gpus, side):
    TunedProbe()(*on(0))  # GPU 0's winner, stored
    fresh = TunedProbe()  # as another process would: nothing remembered in memory
    fresh(*on(1))
    assert not fresh.last_report.from_cache and fresh.last_report.winner.schedule == {"tile_m": 64}
    again = TunedProbe()
    again(*on(0))
    assert again.last_report.from_cache and again.last_report.winner.schedule == {"tile_m": 128}


def test_the_tuning_key_covers_the_sm_count():
    material = {"kernel": {"name": "K"}, "device": GPUS[0]}
    assert cache.entry_key(material) != cache.entry_key({**material, "device": GPUS[1]})


def test_device_identity_names_the_current_devices_sm_count(monkeypatch):
    from warpspec import runtime

    success = driver.cu.CUresult.CUDA_SUCCESS
    attribute = driver.cu.CUdevice_attribute
    capability = {attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                  attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0}
    torch_without_cuda(monkeypatch)
    monkeypatch.setattr(runtime, "_multiprocessors", {0: 132, 1: 114})
    monkeypatch.setattr(driver.cu, "cuDeviceGet", lambda ordinal: (success, ordinal))
    monkeypatch.setattr(driver.cu, "cuDeviceGetName", lambda size, device: (success, b"Fake H200\0\0"))
    monkeypatch.setattr(driver.cu, "cuDeviceGetAttribute", lambda which, device: (success, capability[which]))
    monkeypatch.setattr(driver.cu, "cuDriverGetVersion", lambda: (success, 13000))
    assert bench_module.device_identity() == GPUS[0]
    with driver.use_device(1):
        assert bench_module.device_identity() == GPUS[1]
