"""`train_run` and `nas-stab probe` share one training step (training/step.py); refactoring it
must not change a single bit of a run.

tests/data/train_run_golden.json holds the full results (status, every metric, the whole
history) of a few short runs made by the code before the step was extracted; each run here must
reproduce them exactly (bit for bit: floats compared with ==). The runs cover SGD with momentum,
Adam with warmup, cosine schedule and gradient clipping, the Hessian probes, and a diverging run
(the loss check stops the step before its update). Regenerate (only after a deliberate change
of results) with `python tests/test_training_step.py --write`.

Bit-exact results hold for one torch version on one kind of CPU: the kernels torch picks depend
on the CPU's vector extensions (`torch.backends.cpu.get_cpu_capability()`: AVX2 and AVX512 round
differently in the 7th digit), and on the CPU's vendor (AMD and Intel AVX512 differ in the 7th digit too), so there is one golden
file per vendor and instruction set (`train_run_golden.json`: AMD AVX512, `train_run_golden_avx2.json`:
AMD AVX2, `train_run_golden_intel*.json`: Intel), each recording torch's version, the machine, the
capability and the vendor; a golden of another vendor is skipped with the reason. A machine checks every golden its CPU can run: its own in
this process, a lower one (AVX2 on an AVX512 CPU) in a subprocess with `ATEN_CPU_CAPABILITY` set, so
the AVX2 golden is exercised on the project's AVX512 machines too. Write one with
`[ATEN_CPU_CAPABILITY=avx2] python tests/test_training_step.py --write`.
"""
from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "train_run_golden.json"  # AVX512 on AMD (the machines the project started on)
# (CPU vendor, capability): the same capability's kernels round differently on AMD and Intel CPUs (MKL and oneDNN
# pick their code paths by vendor too: the AMD goldens differ in the 7th digit on an Intel AVX512 machine)
GOLDENS = {("AuthenticAMD", "AVX512"): GOLDEN, ("AuthenticAMD", "AVX2"): DATA / "train_run_golden_avx2.json",
           ("GenuineIntel", "AVX512"): DATA / "train_run_golden_intel.json",
           ("GenuineIntel", "AVX2"): DATA / "train_run_golden_intel_avx2.json"}
ORDER = ("DEFAULT", "AVX2", "AVX512")  # a CPU runs its own capability's kernels and every lower one's

BASE = """\
name: golden
seeds: 1
task:
  dataset: {{name: digits}}
model: {{arch: mlp_resnet, depth: 3, width: 16, branches: 2}}
train: {{{train}}}
stability: {{every: 7, probe_batch: 64, hessian: {hessian}, hessian_every: 14, hessian_batch: 32}}
"""
RUNS = {
    "sgd": dict(train="lr: 0.05, momentum: 0.9, steps: 30, batch_size: 32, eval_every: 10", hessian="false"),
    "adam_clip_cosine": dict(train="optimizer: adam, lr: 0.003, steps: 30, batch_size: 32, warmup_steps: 5, "
                                   "schedule: cosine, grad_clip: 0.5, eval_every: 15", hessian="true"),
    "diverges": dict(train="lr: 40.0, momentum: 0.9, steps: 30, batch_size: 32", hessian="false"),
}


def _run(name: str) -> dict:
    import torch

    from nas_stab.config import loads_spec
    from nas_stab.training import train_run

    torch.set_num_threads(1)
    r = train_run(loads_spec(BASE.format(**RUNS[name])), seed=3)
    return {"status": r.status, "steps": r.steps, "diverged_step": r.diverged_step, "error": r.error,
            "metrics": r.metrics, "history": r.history}


def _plain(v):
    """JSON-safe with exact floats (json writes repr, which round-trips; nan/inf as strings)."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


_BY_CAPABILITY: dict[str, dict] = {}


def _runs_with(capability: str) -> dict:
    """Every golden run's results computed with `capability`'s kernels: in this process when it is this CPU's,
    else in one subprocess with ATEN_CPU_CAPABILITY set (cached)."""
    import os
    import subprocess

    if capability not in _BY_CAPABILITY:
        if capability == _platform()[2]:
            _BY_CAPABILITY[capability] = {n: json.loads(json.dumps(_plain(_run(n)))) for n in sorted(RUNS)}
        else:
            env = {**os.environ, "ATEN_CPU_CAPABILITY": capability.lower()}
            out = subprocess.run([sys.executable, __file__, "--print"], env=env, capture_output=True, text=True,
                                 check=True, cwd=Path(__file__).parent.parent)
            _BY_CAPABILITY[capability] = json.loads(out.stdout)
    return _BY_CAPABILITY[capability]


@pytest.mark.parametrize("vendor,capability", sorted(GOLDENS))
@pytest.mark.parametrize("name", sorted(RUNS))
def test_train_run_bit_identical_to_golden(name, vendor, capability):
    golden = json.loads(GOLDENS[(vendor, capability)].read_text())
    here = _platform()
    made = golden["platform"]
    made_by = made[3] if len(made) > 3 else "AuthenticAMD"  # the first goldens recorded no vendor: AMD EPYC
    if made_by != _vendor():
        pytest.skip(f"golden results were made on a {made_by} CPU; this one is {_vendor()}")
    if made[:2] != here[:2]:
        pytest.skip(f"golden results were made with torch {made[0]} on {made[1]}; here: {here[:2]}")
    if made[2] not in ORDER or here[2] not in ORDER or ORDER.index(made[2]) > ORDER.index(here[2]):
        pytest.skip(f"the {made[2]} golden needs a CPU with {made[2]}; this one has {here[2]}")
    got = _runs_with(made[2])[name]
    want = golden["runs"][name]
    assert got["status"] == want["status"] and got["error"] == want["error"]
    assert got["metrics"] == want["metrics"]
    assert got["history"] == want["history"]
    assert got == want


def test_train_loss_tail_is_the_mean_of_the_last_tenth_of_the_steps():
    from nas_stab.metrics import tail_loss

    losses = {s: float(s) for s in range(1, 101)}
    assert tail_loss(losses, 100) == sum(range(91, 101)) / 10  # steps 91..100
    assert tail_loss(losses, 50) == sum(range(46, 51)) / 5  # mid-run: the tenth of the steps taken so far
    assert tail_loss(losses, 5) == 5.0  # fewer than ten steps: the last one
    assert tail_loss({10: 1.0, 20: 3.0}, 20) == 3.0  # logged every 10th step: only what lies in the tail
    assert math.isnan(tail_loss({}, 10))
    # a run's record: the mean of its history's losses over the last tenth
    run = json.loads(GOLDEN.read_text())["runs"]
    for name, r in run.items():
        if r["status"] != "complete":
            continue
        hist = {int(h["step"]): h["train_loss"] for h in r["history"] if "train_loss" in h}
        last = max(hist)
        assert math.isclose(r["metrics"]["train_loss_tail"], tail_loss(hist, last)), name


def _platform() -> list[str]:
    import torch

    return [torch.__version__, platform.machine(), torch.backends.cpu.get_cpu_capability()]


def _vendor() -> str:
    """The CPU's vendor (/proc/cpuinfo's vendor_id: AuthenticAMD, GenuineIntel; else what `platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    path = GOLDENS[(_vendor(), _platform()[2])]
    path.write_text(json.dumps({"platform": _platform() + [_vendor()], "runs": {n: _plain(_run(n)) for n in sorted(RUNS)}},
                               indent=1) + "\n")
    print(f"wrote {path}")
elif __name__ == "__main__" and sys.argv[1:] == ["--print"]:  # the runs with this process's kernels, for the test
    print(json.dumps({n: _plain(_run(n)) for n in sorted(RUNS)}))
