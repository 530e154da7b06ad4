"""Backends: names, CPU behaviour, and the CUDA / MPS logic checked against fake torch calls.

There is no GPU here, so the CUDA and MPS backends are exercised by replacing the
``torch.cuda`` / ``torch.mps`` / ``torch.backends.mps`` functions they call with fakes
that record their calls: this checks that each backend calls the documented API and maps
its answers to the right keys, not the device itself (that is what the gpu-marked
tests are for).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from collectors import backends
from collectors.backends import (
    BACKEND_NAMES,
    CpuBackend,
    CudaBackend,
    MpsBackend,
    available_backends,
    cpu_name,
    get_backend,
    rss_bytes,
)
from collectors.environment import ENV_VARS, environment_metadata


class Calls:
    """A fake torch function that returns a fixed value and records its arguments."""

    def __init__(self, value=None):
        self.value = value
        self.args: list[tuple] = []

    def __call__(self, *args, **kwargs):
        self.args.append(args)
        return self.value


@pytest.fixture
def fake_mps(monkeypatch):
    fakes = {
        "synchronize": Calls(),
        "current_allocated_memory": Calls(123_456),
        "driver_allocated_memory": Calls(789_012),
        "empty_cache": Calls(),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.mps, name, fake)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(
        backends,
        "sysctl_value",
        lambda key: "Apple M3 Max" if key == "machdep.cpu.brand_string" else None,
    )
    return fakes


@pytest.fixture
def fake_cuda(monkeypatch):
    fakes = {
        "synchronize": Calls(),
        "memory_allocated": Calls(1_000),
        "memory_reserved": Calls(4_096),
        "empty_cache": Calls(),
        "get_device_name": Calls("NVIDIA H200"),
        "is_bf16_supported": Calls(True),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    return fakes


def test_get_backend_names_and_classes():
    assert BACKEND_NAMES == ("cpu", "cuda", "mps")
    assert isinstance(get_backend("cpu"), CpuBackend)
    assert isinstance(get_backend("CUDA"), CudaBackend)
    assert isinstance(get_backend(" mps "), MpsBackend)
    cuda1 = get_backend("cuda:1")
    assert cuda1.index == 1 and cuda1.torch_device == torch.device("cuda", 1)
    for name in BACKEND_NAMES:
        assert get_backend(name).name == name


@pytest.mark.parametrize("bad", ["tpu", "", "cuda:x", "cuda:-1", None, 3])
def test_get_backend_rejects_unknown_names(bad):
    with pytest.raises(ValueError) as info:
        get_backend(bad)
    if isinstance(bad, str):
        for name in BACKEND_NAMES:
            assert name in str(info.value)


def test_cpu_backend():
    cpu = get_backend("cpu")
    assert cpu.is_available() and cpu.unavailable_reason() == ""
    assert cpu.torch_device == torch.device("cpu")
    assert cpu.memory() == {"mem_allocated_bytes": None, "mem_driver_bytes": None}
    assert cpu.synchronize() is None
    cpu.empty_cache()
    assert isinstance(cpu.device_name(), str) and cpu.device_name()
    assert cpu.supports_dtype("float32") and cpu.supports_dtype("bfloat16")
    with pytest.raises(ValueError, match="float64"):
        cpu.supports_dtype("float64")
    assert "cpu" in available_backends()
    assert set(available_backends()) <= set(BACKEND_NAMES)


def test_cpu_name_reads_cpuinfo_and_falls_back(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: Fake\nmodel name\t: Fake CPU 9000 @ 3.0GHz\n")
    assert cpu_name(str(info)) == "Fake CPU 9000 @ 3.0GHz"
    monkeypatch.setattr(backends.platform, "system", lambda: "Linux")
    monkeypatch.setattr(backends.platform, "processor", lambda: "fallback-proc")
    assert cpu_name(str(tmp_path / "missing")) == "fallback-proc"


def test_rss_bytes_sees_a_new_allocation():
    before = rss_bytes()
    block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, written so its pages are resident
    after = rss_bytes()
    assert isinstance(before, int) and before > 0
    assert after - before > 32 * 1024 * 1024
    del block


def test_mps_backend_calls_the_torch_mps_api(fake_mps):
    mps = MpsBackend()
    assert mps.is_available() and mps.unavailable_reason() == ""
    assert mps.torch_device == torch.device("mps")
    assert mps.memory() == {"mem_allocated_bytes": 123_456, "mem_driver_bytes": 789_012}
    mps.synchronize()
    mps.synchronize()
    assert len(fake_mps["synchronize"].args) == 2
    mps.empty_cache()
    assert len(fake_mps["empty_cache"].args) == 1
    assert mps.device_name() == "Apple M3 Max"
    assert "mps" in available_backends()


def test_mps_unavailable_reason_tells_built_from_available(fake_mps, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    mps = MpsBackend()
    assert not mps.is_available()
    assert "is_available() is False" in mps.unavailable_reason()
    assert not mps.supports_dtype("float32")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    assert "is_built() is False" in MpsBackend().unavailable_reason()


def test_cuda_backend_calls_the_torch_cuda_api(fake_cuda):
    cuda = CudaBackend(index=1)
    assert cuda.is_available() and cuda.unavailable_reason() == ""
    assert cuda.memory() == {"mem_allocated_bytes": 1_000, "mem_driver_bytes": 4_096}
    assert fake_cuda["memory_allocated"].args == [(1,)]
    assert fake_cuda["memory_reserved"].args == [(1,)]
    cuda.synchronize()
    assert fake_cuda["synchronize"].args == [(1,)]
    assert cuda.device_name() == "NVIDIA H200"
    cuda.empty_cache()
    assert len(fake_cuda["empty_cache"].args) == 1


def test_cuda_bfloat16_follows_is_bf16_supported(fake_cuda, monkeypatch):
    fake_cuda["is_bf16_supported"].value = False
    assert not CudaBackend().supports_dtype("bfloat16")
    probed = []
    monkeypatch.setattr(
        CudaBackend, "_probe_dtype", lambda self, dtype: probed.append(dtype) or True
    )
    fake_cuda["is_bf16_supported"].value = True
    assert CudaBackend().supports_dtype("bfloat16")
    assert probed == [torch.bfloat16]


def test_cuda_unavailable_reasons(fake_cuda, monkeypatch):
    assert "device_count() is 2" in CudaBackend(index=5).unavailable_reason()
    assert not CudaBackend(index=5).is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "is_available() is False" in CudaBackend().unavailable_reason()
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert "no CUDA support" in CudaBackend().unavailable_reason()


def test_dtype_probe_runs_once_per_dtype():
    class Counting(CpuBackend):
        probes = 0

        def _probe_dtype(self, dtype):
            type(self).probes += 1
            return super()._probe_dtype(dtype)

    backend = Counting()
    for _ in range(3):
        assert backend.supports_dtype("float16")
    assert Counting.probes == 1


def test_dtype_probe_reports_failure_as_unsupported():
    class Broken(CpuBackend):
        @property
        def torch_device(self):
            return torch.device("meta")

    # .item() on the meta device raises, as an unsupported dtype would.
    assert not Broken().supports_dtype("float32")


def test_environment_metadata_keys_and_backends(monkeypatch):
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.delenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", raising=False)
    meta = environment_metadata(["cpu", "mps", "cpu"])
    for key in (
        "os",
        "platform",
        "machine",
        "python",
        "torch",
        "transformers",
        "regimes",
        "cpu",
        "hostname",
        "timestamp_utc",
        "torch_threads",
        "env",
        "backends",
    ):
        assert key in meta, key
    assert meta["torch"] == torch.__version__
    assert meta["timestamp_utc"].endswith("+00:00")
    assert set(meta["env"]) == set(ENV_VARS)
    assert meta["env"]["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    assert meta["env"]["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] is None
    assert list(meta["backends"]) == ["cpu", "mps"]
    assert meta["backends"]["cpu"] == {"available": True, "device": meta["cpu"]}
    if not torch.backends.mps.is_available():
        assert meta["backends"]["mps"]["available"] is False
        assert "torch.backends.mps" in meta["backends"]["mps"]["reason"]
    with pytest.raises(ValueError, match="unknown backend"):
        environment_metadata(["tpu"])


def test_environment_metadata_with_fake_gpus(fake_cuda, fake_mps, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))

    class Props:
        total_memory = 141 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    from collectors import environment

    monkeypatch.setattr(environment, "_nvidia_driver_version", lambda: "570.86")
    monkeypatch.setattr(environment, "sysctl_value", lambda key: "Apple M3 Max")
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91900)
    cudnn_sdp = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        meta = environment_metadata(["cuda", "mps"])
    finally:
        torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)
    cuda = meta["backends"]["cuda"]
    assert cuda["cudnn"] == 91900 and isinstance(cuda["cudnn_enabled"], bool)
    assert cuda["sdpa_backends_enabled"] == {
        "cudnn": False,
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    assert cuda["device"] == "NVIDIA H200" and cuda["driver"] == "570.86"
    assert cuda["cuda_runtime"] == "12.8" and cuda["device_count"] == 2
    assert [d["capability"] for d in cuda["devices"]] == ["9.0", "9.0"]
    mps = meta["backends"]["mps"]
    assert mps["device"] == "Apple M3 Max" and mps["chip"] == "Apple M3 Max"
    assert "macos" in mps
