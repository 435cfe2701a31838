"""The GPU half of the environment key, in-process: CUDA's visibility rules, no CUDA initialisation.

The NVML answers are made up (this machine has no GPU); tests/integration/test_gpu.py checks them against
CUDA's own on a real one.
"""

from __future__ import annotations

import types

import pytest

from hatch_precompile.errors import Unidentified
from hatch_precompile.run.sets import environment_key, gpu

H100 = gpu.Device("NVIDIA H100 80GB HBM3", "9.0", "GPU-965ed56d-8fbe-a492-bee9-3c3f47d5b1e8")
H100_B = gpu.Device("NVIDIA H100 80GB HBM3", "9.0", "GPU-11111111-2222-3333-4444-555555555555")
L4 = gpu.Device("NVIDIA L4", "8.9", "GPU-0ff1ce00-0000-0000-0000-000000000000")


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [H100, L4, H100_B]),
        ("", []),
        ("2,0", [H100_B, H100]),
        ("0,7,1", [H100]),  # like CUDA: the list ends at the first entry that names no device
        ("-1,0", []),
        ("GPU-0ff1", [L4]),
        ("GPU-", []),  # a prefix of several UUIDs names none of them
        ("1, 0", [L4, H100]),
        ("0,0", [H100]),
        ("x", []),
    ],
)
def test_visible_devices_follow_cuda_visible_devices(visible, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert gpu.visible([H100, L4, H100_B], environ) == expected


def test_mig_slices_are_not_guessed():
    with pytest.raises(Unidentified, match="MIG slice"):
        gpu.visible([H100], {"CUDA_VISIBLE_DEVICES": "MIG-4b5c2d7e-0000"})


def test_mixed_models_need_the_bus_order(monkeypatch):
    monkeypatch.setattr(gpu, "devices", lambda: [L4, H100])
    with pytest.raises(Unidentified, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        gpu.identify({})
    assert gpu.identify({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == L4
    assert gpu.identify({"CUDA_VISIBLE_DEVICES": "1"}) == H100
    monkeypatch.setattr(gpu, "devices", lambda: [H100, H100_B])
    assert gpu.identify({}) == H100  # one model: which one is cuda:0 does not matter


def test_no_driver_means_no_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "NVML_LIBRARY", "libnvidia-ml-not-here.so.1")  # as on a machine without the driver
    assert gpu.devices() == []


def fake_torch(cuda: str | None) -> types.SimpleNamespace:
    """Just what the key reads; no ``torch.cuda`` at all, so touching it would raise."""
    return types.SimpleNamespace(
        __version__="2.13.0+cu130" if cuda else "2.13.0+cpu",
        version=types.SimpleNamespace(cuda=cuda, hip=None),
        backends=types.SimpleNamespace(cpu=types.SimpleNamespace(get_cpu_capability=lambda: "AVX2")),
    )


def test_key_asks_nvml_not_cuda(monkeypatch):
    monkeypatch.setattr(gpu, "identify", lambda: H100)
    key = environment_key.current(fake_torch("13.0"))
    assert (key["gpu"], key["gpu_capability"], key["cuda"]) == ("NVIDIA H100 80GB HBM3", "9.0", "13.0")


def test_unidentified_gpu_gets_a_key_no_build_has(monkeypatch):
    def refuse():
        raise Unidentified("NVML's nvmlInit_v2 returned error 9")

    monkeypatch.setattr(gpu, "identify", refuse)
    key = environment_key.current(fake_torch("13.0"))
    assert key["gpu"] == "unidentified: NVML's nvmlInit_v2 returned error 9"


def test_cpu_torch_has_no_gpu_fields():
    key = environment_key.current(fake_torch(None))
    assert key["gpu"] is key["gpu_capability"] is key["triton"] is key["cuda"] is None
