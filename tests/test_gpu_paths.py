"""CPU-side checks of the GPU paths: what the registry allows (graph capture, element types
on a GPU), the driver's refusals, the environment an implementation needs, MPI's GPU
awareness and host staging, and the GPU extras' version floors. What only a GPU can show
(kernels, NCCL, NVSHMEM) is `make gpu-check`'s."""

from __future__ import annotations

import argparse
import configparser
import os

import pytest
from packaging.requirements import Requirement

from commbench.errors import UsageError
from commbench.harness import driver
from commbench.kernels.baselines.mpi import mpi_gpu_support
from commbench.kernels.registry import implementations, lookup
from tests.mpirun import ROOT, run_mpi


def run_args(*argv: str) -> argparse.Namespace:
    """``commbench run ARGV...``'s arguments, as the driver's own parser reads them."""
    parser = argparse.ArgumentParser()
    driver.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("allreduce", "--impl", "rccl", "--backend", "rocm", "-G", "4"), "not available on backend 'rocm'"),
        (("allreduce", "--impl", "mpi", "--backend", "cuda", "-G", "4", "-d", "float"), "cannot be captured"),
        (("alltoallv", "--impl", "fast+sched", "--backend", "cuda", "-G", "2"), "cannot be captured"),
        (("alltoallv", "--impl", "mpi", "--backend", "cuda", "-G", "2"), "cannot be captured"),
        (("allreduce", "--impl", "mpi", "--backend", "cuda", "-d", "bf16"), "does not take bfloat16 on cuda"),
        (("allreduce", "--impl", "mpi", "--backend", "rocm", "-d", "fp16"), "does not take float16 on rocm"),
        (("allreduce", "--impl", "nccl", "--backend", "cpu"), "does not run on backend 'cpu'"),
        (("allreduce", "--impl", "ring", "--backend", "cpu", "-G", "2"), "needs --backend cuda"),
        (("reducescatter", "--impl", "mpi", "--backend", "cuda", "-d", "bf16"), "does not take bfloat16 on cuda"),
        (("broadcast", "--impl", "mpi", "--backend", "cuda", "-G", "2"), "cannot be captured"),
        (("allgather", "--impl", "nccl", "--backend", "cpu"), "does not run on backend 'cpu'"),
    ],
)  # fmt: skip
def test_driver_refuses_with_one_line(argv, message):
    with pytest.raises(UsageError, match=message) as info:
        driver.make_config(run_args(*argv))
    assert "\n" not in str(info.value)


def test_driver_accepts_what_can_be_captured_or_run():
    for spec in implementations():
        if "cuda" in spec.backends and spec.capturable:
            argv = [spec.collective, "--impl", spec.name, "--backend", "cuda", "-G", "4"]
            assert driver.make_config(run_args(*argv)).graph_iters == 4
    cfg = driver.make_config(
        run_args("allreduce", "--impl", "mpi", "--backend", "cpu", "-d", "bf16")
    )
    assert cfg.dtype.itemsize == 2


def test_registry_marks_host_synchronising_implementations():
    uncapturable = {(s.collective, s.name) for s in implementations() if not s.capturable}
    assert uncapturable == {
        ("allreduce", "mpi"),
        ("alltoall", "mpi"),
        ("alltoallv", "mpi"),
        ("alltoallv", "fast+sched"),
        ("allgather", "mpi"),
        ("reducescatter", "mpi"),
        ("broadcast", "mpi"),
    }


def test_driver_sets_the_implementations_environment_before_the_device(monkeypatch):
    """NVRAR's chunk streams need their own hardware queues: the profiles'
    CUDA_DEVICE_MAX_CONNECTIONS=1 is raised before CUDA could read it."""
    assert lookup("allreduce", "nvrar").env == {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.setattr(driver, "check_backend_available", _stop)
    with pytest.raises(_Stopped):
        driver.run(run_args("allreduce", "--impl", "nvrar", "--backend", "cuda", "-d", "bf16"))
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    with pytest.raises(_Stopped):
        driver.run(run_args("allreduce", "--impl", "nvrar", "--backend", "cpu"))
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


class _Stopped(Exception):
    pass


def _stop(name: str) -> None:
    raise _Stopped(name)


class FakeLib:
    """A libmpi stand-in with only the symbols given."""

    def __init__(self, **symbols) -> None:
        self.__dict__.update(symbols)


def test_mpi_gpu_support_asks_the_library():
    # The PyPI Open MPI wheel (the default MPI here) is built without CUDA/ROCm support.
    assert mpi_gpu_support("cuda") == (False, "MPIX_Query_cuda_support() = 0")
    assert mpi_gpu_support("rocm") == (False, "MPIX_Query_rocm_support() = 0")
    assert mpi_gpu_support("cuda", FakeLib(MPIX_Query_cuda_support=lambda: 1), {}) == (
        True,
        "MPIX_Query_cuda_support() = 1",
    )

    def mpich_query(gpu_type, flag_ref):  # MPICH: CUDA 0, ZE 1, HIP 2
        flag_ref._obj.value = int(gpu_type.value == 2)
        return 0

    lib = FakeLib(MPIX_GPU_query_support=mpich_query)
    assert mpi_gpu_support("rocm", lib, {})[0] is True
    assert mpi_gpu_support("cuda", lib, {})[0] is False
    assert mpi_gpu_support("cuda", FakeLib(), {"MPICH_GPU_SUPPORT_ENABLED": "1"})[0] is True
    assert mpi_gpu_support("cuda", FakeLib(), {}) == (
        False,
        "no GPU-support query in the MPI library",
    )


def test_mpi_stages_device_buffers_when_mpi_is_not_gpu_aware():
    proc = run_mpi(2, [str(ROOT / "tests" / "scripts" / "mpi_staging_check.py")], timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def gpu_extras() -> dict[str, list[Requirement]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    return {k: [Requirement(r) for r in extras[k].split("\n") if r.strip()] for k in extras}


def test_gpu_extras_bring_headers_and_a_nvshmem4py_with_signal_op():
    """nvshmem4py 0.1.1 has no signal_op and reads ``stream.handle``; ``ll8.cu`` needs the
    CUDA headers and NVRTC that CuPy's ``ctk`` extra brings; CUDA 13 has its own extra."""
    extras = gpu_extras()
    for extra, cupy_name, nvshmem_name in (
        ("cuda", "cupy-cuda12x", "nvshmem4py-cu12"),
        ("cuda13", "cupy-cuda13x", "nvshmem4py-cu13"),
    ):
        reqs = {r.name: r for r in extras[extra]}
        assert "ctk" in reqs[cupy_name].extras
        spec = reqs[nvshmem_name].specifier
        assert not spec.contains("0.1.1") and spec.contains("0.4.1")


def test_list_shows_what_cannot_be_captured_or_taken_on_gpus(capsys):
    assert driver.list_implementations(None) == 0
    lines = {tuple(line.split()[:2]): line for line in capsys.readouterr().out.splitlines()}
    assert lines[("alltoallv", "fast+sched")].endswith("[no -G]")
    assert "[on GPUs: float32," in lines[("allreduce", "mpi")]
    assert "[" not in lines[("allreduce", "nccl")]
