"""A step's AOTInductor package, opened and run first in a fresh process of its own.

torch's AOTInductor loader can crash the process that opens a package: on an NVIDIA H200 with
torch 2.11 it segfaults on any CUDA package, torch's own ``aoti_load_package`` included. A crash
can only be survived in another process. So before a build (or bake, warm, verify) opens a package
in its own process, ``prove`` starts a fresh Python -- spawned, never forked, so no CUDA state is
inherited -- that opens the package with the C++ loader users get (run/steps/exported_step.py), binds the
given constants, runs it once on the given inputs and reports the package's constants, calling
convention and the environment it held for. A child that dies on a signal or hangs past
``HATCH_PRECOMPILE_PROOF_TIMEOUT`` raises LoaderCrashed; a loader that refuses (a Python error)
raises LoaderRefused.

    (the child: supervisor.command(python, __name__, DIR); DIR holds step.pt2 and io.pt)
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile.child import supervisor
from hatch_precompile.errors import LoaderCrashed, LoaderRefused, StepRefused

PACKAGE_FILE, IO_FILE, PROOF_FILE = "step.pt2", "io.pt", "proof.json"


@dataclasses.dataclass
class Proof:
    """What the child found: the package's constants and calling convention, and where it ran."""

    fqns: list[str]
    call_spec: list[str]
    environment: dict[str, Any]  # run/exported_step.proof_environment: torch, device, cuda
    ran: bool  # False where the constants given did not cover the package's (opened, not run)


def prove(package: bytes, constants: dict[str, Any], inputs: list[Any], timeout: float) -> Proof:
    """Open ``package`` in a fresh process, bind ``constants`` (its fqn -> tensor; those it names),
    run it on ``inputs`` (the flat tensors it takes); the Proof, or LoaderCrashed / LoaderRefused."""
    import torch

    from hatch_precompile.run.steps import exported_step

    tensors = [*constants.values(), *inputs]
    environment = exported_step.proof_environment(torch, sorted({str(t.device) for t in tensors}) or ["cpu"])
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-proof-") as tmp:
        (Path(tmp) / PACKAGE_FILE).write_bytes(package)
        torch.save({"constants": {k: v.detach() for k, v in constants.items()},
                    "inputs": [t.detach() for t in inputs]}, Path(tmp) / IO_FILE)
        # This interpreter's own torch: the one the proof is recorded for (bake runs here under
        # another environment's interpreter than the one hatch_precompile is installed in).
        # The loader extracts the package under the temp dir: under this one, it goes even if the child crashes.
        proc = subprocess.Popen(supervisor.command(sys.executable, __name__, tmp), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "TMPDIR": tmp})
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            output = (proc.communicate()[0] or "") if proc.stdout else ""
            raise LoaderCrashed(f"hung (no answer in {timeout:g} s)", environment, output) from None
        if proc.returncode < 0:
            raise LoaderCrashed(f"crashed ({_signal_name(-proc.returncode)})", environment, output)
        found = Path(tmp) / PROOF_FILE
        if proc.returncode != 0 or not found.is_file():
            lines = [line for line in output.strip().splitlines() if line.strip()]
            raise LoaderRefused(lines[-1] if lines else f"the proving process exited {proc.returncode}")
        return Proof(**json.loads(found.read_text()))


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: whatever it started goes too
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def main(argv: list[str]) -> int:
    """The child: open, bind, run once, write what it found."""
    import faulthandler

    faulthandler.enable()  # a crash leaves torch's frame in the build's output
    directory = Path(argv[1])
    import torch

    from hatch_precompile.run.steps import exported_step
    from hatch_precompile.run.torch_internals.steps import aoti

    given = torch.load(directory / IO_FILE, weights_only=True)
    try:
        loader = exported_step.open_package(torch, (directory / PACKAGE_FILE).read_bytes())
    except StepRefused as exc:
        print(exc, flush=True)
        return 1
    fqns = [str(f) for f in loader.get_constant_fqns()]
    tensors = [*given["constants"].values(), *given["inputs"]]
    ran = all(f in given["constants"] for f in fqns)  # else the build names what the package lacks
    if ran:
        aoti.aoti_bind(loader, {f: given["constants"][f] for f in fqns})
        loader.run(given["inputs"])
        if any(t.is_cuda for t in tensors):
            torch.cuda.synchronize()
    environment = exported_step.proof_environment(torch, sorted({str(t.device) for t in tensors}) or ["cpu"])
    proof = Proof(fqns, [str(s) for s in loader.get_call_spec()], environment, ran)
    (directory / PROOF_FILE).write_text(json.dumps(dataclasses.asdict(proof)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
