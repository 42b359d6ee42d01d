"""Every diverged run says why (`diverged_why`), the divergence threshold is loss_factor x the loss of
a uniform prediction, loss spikes are counted, undefined metrics are empty cells (never inf/nan), and
the divergence map can be coloured by `diverged_why`."""
import math

import pandas as pd
import pytest

from nas_stab.config import loads_spec
from nas_stab.metrics import DIVERGED_WHY
from nas_stab.stability import DivergenceRule, diverged_why
from nas_stab.training.loop import SpikeCounter, train_run

DIGITS = """\
name: dw
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.01, momentum: 0.0, batch_size: 32, steps: 12}
stability: {every: 4, probe_batch: 64, hessian: false}
"""


# ---------------------------------------------------------------- the rules, on histories


def test_labels_in_order_of_what_the_metrics_showed_first():
    h = [{"step": 0, "fwd_ratio": 2.0, "attn_logit_max": 5.0}, {"step": 50, "eos_ratio": 1.3, "attn_logit_max": 6.0},
         {"step": 100, "eos_ratio": 0.5, "attn_logit_max": 40.0}]
    assert diverged_why(h, "loss 99 > 10 x reference loss 2.3", None, 120) == "eos_above_1"
    assert diverged_why(h, "loss 99 > ...", 30, 120) == "loss_spike"  # the spike came before the eos snapshot
    h2 = [{**x, "eos_ratio": 0.5} for x in h]
    assert diverged_why(h2, "loss 99 > ...", None, 120) == "attn_logit_growth"
    assert diverged_why(h2, "loss 99 > ...", None, 80) == "loss_above_threshold"  # the growth came after
    assert diverged_why([{"step": 0, "fwd_ratio": 500.0}], "loss 99 > ...", 3, 10) == "forward_explosion_at_init"
    assert diverged_why([{"step": 0}], "loss 99 > ...", None, 10, init_loss=40.0, threshold=23.0) == "forward_explosion_at_init"
    plain = [{"step": 0, "fwd_ratio": 1.5}]
    assert diverged_why(plain, "non-finite gradient norm of blocks.1.w (inf) at step 4; then non-finite loss (nan) at step 5",
                        None, 5) == "nonfinite_gradient"
    assert diverged_why(plain, "non-finite forward output of blocks.0 (inf) at step 7, then non-finite loss (nan)",
                        None, 7) == "nonfinite_forward"
    assert diverged_why(plain, "non-finite forward output of blocks.0 (inf)", None, 0) == "forward_explosion_at_init"
    assert diverged_why(plain, "non-finite loss (nan)", None, 9) == "nonfinite_loss"
    for label in ("eos_above_1", "loss_spike", "nonfinite_gradient", "forward_explosion_at_init"):
        assert label in DIVERGED_WHY


def test_threshold_is_loss_factor_times_the_uniform_prediction_loss():
    rule = DivergenceRule(10.0, math.log(10))
    assert rule.threshold == pytest.approx(10 * math.log(10))
    assert not rule.check(20.0, 1)  # a bad init's loss of 20 is under 23.0 ...
    assert rule.check(24.0, 2)  # ... and 24 is over it, whatever the first loss was
    assert "reference loss 2.303" in rule.reason


def test_loss_spikes_need_six_sigma_over_the_last_128_steps():
    sc = SpikeCounter()
    for i in range(128):
        sc.add(1.0 + 0.01 * (i % 2), i)
    sc.add(1.05, 128)  # mean 1.005, std 0.005: above mean + 6 std = 1.035, a spike
    assert sc.count == 1 and sc.first == 128
    sc.add(1.02, 129)
    assert sc.count == 1
    short = SpikeCounter()
    for i in range(100):
        short.add(1.0, i)
    short.add(100.0, 100)  # fewer than 128 previous steps: not counted
    assert short.count == 0


# ---------------------------------------------------------------- through a run


def test_a_diverged_run_has_a_label_and_trials_values_are_never_inf_or_nan():
    r = train_run(loads_spec(DIGITS.replace("lr: 0.01", "lr: 30.0")), 0)
    assert r.status == "diverged"
    assert r.metrics["diverged_why"] in DIVERGED_WHY, r.metrics["diverged_why"]
    assert r.metrics["loss_spikes"] == 0
    for k, v in r.metrics.items():
        assert not isinstance(v, float) or math.isfinite(v), (k, v)
    for h in r.history:
        for k, v in h.items():
            assert not isinstance(v, float) or math.isfinite(v), (k, v)


def test_complete_run_records_every_metric_at_init_and_end_and_init_loss():
    r = train_run(loads_spec(DIGITS), 0)
    assert r.status == "complete" and "diverged_why" not in r.metrics
    for p in ("init_", "final_"):
        for k in ("fwd_ratio", "branch_ratio", "grad_norm", "branch_grad_norm", "grad_ratio", "update_ratio",
                  "update_norm", "loss_drop"):
            assert math.isfinite(r.metrics[p + k]), p + k
    assert r.metrics["init_loss"] == pytest.approx(r.history[0]["probe_loss"])
    assert r.metrics["loss_spikes"] == 0
    snaps = [h for h in r.history if "fwd_ratio" in h]
    assert [h["step"] for h in snaps] == [0, 4, 8, 12] and all("fwd_norm.1" in h and "grad_stream.1" in h for h in snaps)


def test_fixup_zero_classifier_leaves_undefined_metrics_empty_not_divergence():
    """Fixup: the classifier starts at zero, so the gradient reaching the hidden stream is exactly 0
    at init: grad_ratio is 0/0, undefined. It must be absent (an empty cell), and the run must not diverge."""
    r = train_run(loads_spec(DIGITS.replace("width: 16}", "width: 16, init: fixup}")), 0)
    assert r.status == "complete", r.error
    assert "init_grad_ratio" not in r.metrics and "final_grad_ratio" in r.metrics
    for k, v in r.metrics.items():
        assert not isinstance(v, float) or math.isfinite(v), (k, v)


# ---------------------------------------------------------------- the divergence map


def test_divergence_map_coloured_by_why():
    pytest.importorskip("matplotlib")
    from nas_stab.analysis.table import analyze
    from nas_stab.results import plots

    rows = []
    for agg in ("sum", "stam"):
        for C in (1, 4):
            for lr in (0.1, 1.0):
                for seed in (0, 1):
                    bad = agg == "sum" and C == 4 and lr == 1.0
                    rows.append({"trial": len(rows), "seed": seed, "model.aggregation": agg, "model.branches": C,
                                 "train.lr": lr, "status": "diverged" if bad else "complete",
                                 "val_acc": None if bad else 0.5 + 0.1 * seed,
                                 "diverged_why": ("eos_above_1" if seed == 0 else "loss_spike") if bad else ""})
    df = pd.DataFrame(rows)
    a = analyze(df, transfer="model.branches", compare=["model.aggregation"], metric="val_acc", n_boot=10)
    fig = plots.divergence_figure(a, "diverged_why", why=list(df["diverged_why"]))
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert legend == ["eos_above_1"]  # ties between the two seeds' labels: alphabetical
    assert "coloured by why" in fig._suptitle.get_text()
    assert plots.divergence_plot(a, "diverged_why", why=list(df["diverged_why"]))[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        plots.divergence_figure(a, "status")
    import matplotlib.pyplot as plt

    plt.close("all")
