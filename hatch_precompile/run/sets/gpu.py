"""Which GPU this process will compile for, asked of the driver's NVML, never of CUDA.

``import pkg`` calls load(), which needs the GPU's name for the environment key. Asking CUDA
(``torch.cuda.get_device_name``, even ``torch.cuda.is_available``) initialises the driver in the
parent, and fork-started workers (DataLoader, multiprocessing) then cannot use CUDA. NVML is the
driver's management library: it answers without a CUDA context. ``CUDA_VISIBLE_DEVICES`` is
applied as CUDA applies it, so the GPU named is the one torch will call ``cuda:0``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
from collections.abc import Mapping

from hatch_precompile.errors import Unidentified

NVML_LIBRARY = "libnvidia-ml.so.1"
_NAME_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
_UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
_NO_DRIVER = {9, 12}  # NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND


@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    capability: str  # "9.0"
    uuid: str  # "GPU-5b3c..."


def devices() -> list[Device]:
    """Every GPU the driver has, in NVML's (PCI bus) order; [] without a driver."""
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return []  # no NVIDIA driver on this machine
    with _lock:
        status = nvml.nvmlInit_v2()
        if status in _NO_DRIVER:  # the library without its kernel driver: CUDA finds no GPU either
            return []
        _check(status, "nvmlInit_v2")
        try:
            count = ctypes.c_uint()
            _check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
            return [_device(nvml, index) for index in range(count.value)]
        finally:
            nvml.nvmlShutdown()


_lock = threading.Lock()


def _device(nvml: ctypes.CDLL, index: int) -> Device:
    handle = ctypes.c_void_p()
    _check(nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
    name = ctypes.create_string_buffer(_NAME_BUFFER)
    _check(nvml.nvmlDeviceGetName(handle, name, _NAME_BUFFER), "nvmlDeviceGetName")
    uuid = ctypes.create_string_buffer(_UUID_BUFFER)
    _check(nvml.nvmlDeviceGetUUID(handle, uuid, _UUID_BUFFER), "nvmlDeviceGetUUID")
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)),
           "nvmlDeviceGetCudaComputeCapability")
    return Device(name.value.decode(errors="replace"), f"{major.value}.{minor.value}", uuid.value.decode(errors="replace"))


def _check(status: int, call: str) -> None:
    if status != 0:
        raise Unidentified(f"NVML's {call} returned error {status}")


def visible(all_devices: list[Device], environ: Mapping[str, str] | None = None) -> list[Device]:
    """The devices CUDA would show this process, in its order (``CUDA_VISIBLE_DEVICES``).

    Like CUDA, the list ends at the first entry that names no device. MIG slices are not
    matched here: an NVML index names the whole GPU, which torch's key would not.
    """
    raw = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(all_devices)
    shown: list[Device] = []
    for item in raw.split(","):
        item = item.strip()
        if item.startswith("MIG-"):
            raise Unidentified(f"CUDA_VISIBLE_DEVICES names a MIG slice ({item}), which NVML's device list does not name")
        if item.startswith("GPU-"):
            matches = [d for d in all_devices if d.uuid.startswith(item)]
            if len(matches) != 1:
                break
            device = matches[0]
        else:
            try:
                index = int(item)
            except ValueError:
                break
            if not 0 <= index < len(all_devices):
                break
            device = all_devices[index]
        if device in shown:
            break
        shown.append(device)
    return shown


def identify(environ: dict[str, str] | None = None) -> Device | None:
    """The GPU torch will call ``cuda:0`` here, or None when CUDA would show none.

    Raises Unidentified when NVML fails, or when the visible GPUs are of different models and
    CUDA's order among them (``CUDA_DEVICE_ORDER``, fastest first by default) is not the bus order.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    shown = visible(devices(), env)
    if not shown:
        return None
    models = sorted({(d.name, d.capability) for d in shown})
    if len(models) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        raise Unidentified(
            f"the visible GPUs are of {len(models)} models ({', '.join(name for name, _ in models)}) and "
            "CUDA orders them fastest first, so which one is cuda:0 is unknown without initialising CUDA "
            "(set CUDA_DEVICE_ORDER=PCI_BUS_ID or CUDA_VISIBLE_DEVICES)"
        )
    return shown[0]
