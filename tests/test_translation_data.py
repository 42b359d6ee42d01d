"""Translation data: files, errors that name them, tokenizer cache, batching, loss."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
import yaml

from nas_stab.config import loads_spec
from nas_stab.data import DATASETS, load_dataset
from nas_stab.data.text import BOS, EOS, PAD, synthetic_pairs, train_tokenizer
from nas_stab.errors import DataError, SpecError
from nas_stab.tasks import load_task

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
CPU = torch.device("cpu")


def spec_of(dataset: dict, train: dict | None = None, cache=None, **task):
    ds = {"vocab_size": 200, **dataset}
    if cache is not None:
        ds["cache"] = str(cache)
    data = {"name": "t", "task": {"kind": "translation", "dataset": ds, **task},
            "model": {"arch": "transformer", "d_model": 16, "enc_layers": 1, "dec_layers": 1, "ffn_per_branch": 16},
            "train": train or {"batch_size": 16}, "stability": {"probe_batch": 8}, "search": {"objective": "bleu"}}
    return loads_spec(yaml.safe_dump(data))


def write(path: Path, lines: list[str], gz: bool = False):
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_and_reorders():
    a = synthetic_pairs(50, 0)
    assert a == synthetic_pairs(50, 0)
    assert a != synthetic_pairs(50, 1)
    src, tgt = a
    # SOV: the target ends with the (made-up) verb; source verbs sit after the subject
    assert all(len(s.split()) >= 3 and len(t.split()) >= 3 for s, t in zip(src, tgt))
    assert any(s.split()[-1] in ("today", "often", "slowly", "again") for s in src)


def test_synthetic_name_is_task_qualified():
    assert "translation/synthetic" in DATASETS and "synthetic" in DATASETS
    assert DATASETS.entry("synthetic").info["task"] == "classification"
    s = spec_of({"name": "synthetic", "size": 300})
    d = load_dataset(s, CPU)
    assert {k: len(v) for k, v in d.splits.items()} == {"train": 240, "val": 30, "test": 30}
    # the classification synthetic still resolves under task.kind classification
    c = loads_spec("name: c\ntask: {dataset: {name: synthetic, size: 50}}\nmodel: {arch: mlp}")
    assert load_dataset(c, CPU).info.classes == 10


def test_split_tensors_layout(tmp_path):
    d = load_dataset(spec_of({"name": "synthetic", "size": 100}, cache=tmp_path), CPU)
    s = d.splits["train"]
    assert s.tgt[:, 0].eq(BOS).all()
    for i in range(5):
        n, m = int(s.src_len[i]), int(s.tgt_len[i])
        assert s.src[i, n - 1] == EOS and s.src[i, n:].eq(PAD).all() and s.src[i, : n - 1].ne(PAD).all()
        assert s.tgt[i, m] == EOS and s.tgt[i, m + 1 :].eq(PAD).all()
        assert d.detokenize([s.src[i, : n - 1].tolist()])[0] == s.src_text[i]
    assert d.info.extra["pad"] == PAD and d.info.extra["vocab"] == d.sp.get_piece_size()


# ---------------------------------------------------------------- files and errors


def test_multi30k_missing_file_names_it(tmp_path):
    write(tmp_path / "train.de", ["a b"])
    with pytest.raises(DataError) as e:
        load_dataset(spec_of({"name": "multi30k", "root": str(tmp_path)}), CPU)
    msg = str(e.value)
    assert "train.en" in msg and str(tmp_path) in msg


def test_multi30k_layout_and_subsets(tmp_path):
    de = [f"ein satz nummer {i}" for i in range(40)]
    en = [f"a sentence number {i}" for i in range(40)]
    for stem in ("train", "val", "test_2016_flickr"):
        write(tmp_path / f"{stem}.de.gz", de, gz=True)
        write(tmp_path / f"{stem}.en", en)
    s = spec_of({"name": "multi30k", "root": str(tmp_path), "train": 30, "val": 10}, cache=tmp_path / "c")
    d = load_dataset(s, CPU)
    assert len(d.splits["train"]) == 30 and len(d.splits["val"]) == 10 and len(d.splits["test"]) == 40
    again = load_dataset(s, CPU)
    assert d.splits["train"].src_text == again.splits["train"].src_text
    assert all(en[de.index(x)] == y for x, y in zip(d.splits["val"].src_text, d.splits["val"].tgt_text))
    # src/tgt swap: en -> de
    r = load_dataset(spec_of({"name": "multi30k", "root": str(tmp_path), "src": "en", "tgt": "de"}, cache=tmp_path / "c"), CPU)
    assert r.splits["test"].src_text == en


def test_misaligned_files_name_both(tmp_path):
    write(tmp_path / "a.src", ["x", "y", "z"])
    write(tmp_path / "a.tgt", ["x", "y"])
    with pytest.raises(DataError, match=r"a\.src.*3.*a\.tgt.*2"):
        load_dataset(spec_of({"name": "text_pairs", "root": str(tmp_path), "train_src": "a.src", "train_tgt": "a.tgt"}), CPU)


def test_text_pairs_missing_file_and_carved_val(tmp_path):
    src, tgt = synthetic_pairs(100, 3)
    write(tmp_path / "tr.s", src)
    write(tmp_path / "tr.t", tgt)
    s = spec_of({"name": "text_pairs", "root": str(tmp_path), "train_src": "tr.s", "train_tgt": "tr.t", "val": 20}, cache=tmp_path)
    d = load_dataset(s, CPU)
    assert len(d.splits["train"]) == 80 and len(d.splits["val"]) == 20 and "test" not in d.splits
    assert sorted(d.splits["train"].src_text + d.splits["val"].src_text) == sorted(src)
    s = spec_of({"name": "text_pairs", "root": str(tmp_path), "train_src": "tr.s", "train_tgt": "tr.t",
                 "test_src": "nope.s", "test_tgt": "tr.t"})
    with pytest.raises(DataError, match="nope.s"):
        load_dataset(s, CPU)


def test_text_pairs_needs_both_sides():
    with pytest.raises(SpecError) as e:
        spec_of({"name": "text_pairs", "train_src": "a"})
    assert e.value.key == "task.dataset.train_tgt"
    with pytest.raises(SpecError) as e:
        spec_of({"name": "text_pairs"})
    assert e.value.key == "task.dataset.train_src"


def test_translation_dataset_needs_translation_task():
    with pytest.raises(SpecError, match="translation dataset"):
        loads_spec("name: c\ntask: {dataset: {name: multi30k}}\nmodel: {arch: mlp}")


# ---------------------------------------------------------------- tokenizer


def test_tokenizer_is_cached_by_content_and_vocab(tmp_path):
    src, tgt = synthetic_pairs(200, 0)
    train_tokenizer(src, tgt, 120, "bpe", tmp_path)
    files = sorted((tmp_path / "spm").glob("*.model"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    sp = train_tokenizer(src, tgt, 120, "bpe", tmp_path)
    assert files[0].stat().st_mtime_ns == mtime  # loaded, not retrained
    train_tokenizer(src, tgt, 100, "bpe", tmp_path)
    train_tokenizer(src[:100], tgt[:100], 120, "bpe", tmp_path)
    train_tokenizer(src, tgt, 120, "unigram", tmp_path)
    assert len(list((tmp_path / "spm").glob("*.model"))) == 4
    assert sp.decode(sp.encode(src[0])) == src[0]


def test_vocab_size_is_a_soft_limit(tmp_path):
    src, tgt = synthetic_pairs(100, 0)
    sp = train_tokenizer(src, tgt, 50_000, "bpe", tmp_path)
    assert 16 < sp.get_piece_size() < 50_000


# ---------------------------------------------------------------- task: batches and loss


@pytest.fixture(scope="module")
def synth_task(tmp_path_factory):
    s = spec_of({"name": "synthetic", "size": 600, "max_len": 20}, train={"max_tokens": 300},
                cache=tmp_path_factory.mktemp("c"))
    return load_task(s, 0, CPU)


def test_token_budget_and_epoch_coverage(synth_task):
    task = synth_task
    split = task.train_split
    seen = []
    for idx in task._plan(torch.Generator().manual_seed(5)):
        n = len(idx)
        longest = int(task._len[idx].max())
        assert n * longest <= 300 or n == 1
        seen += idx.tolist()
    assert sorted(seen) == list(range(len(split)))
    gen = torch.Generator().manual_seed(1)
    it = task.train_batches(gen)
    for _ in range(task.steps_per_epoch + 3):
        src, tin, tout = next(it)
        assert src.shape[0] == tin.shape[0] == tout.shape[0] and tin.shape == tout.shape
        assert tin[:, 0].eq(BOS).all() and torch.equal(tin[:, 1:], tout[:, :-1])
        assert src.shape[0] * max(src.shape[1], tout.shape[1]) <= 300 or src.shape[0] == 1
        assert src[:, -1].ne(PAD).any() and tout[:, -1].ne(PAD).any()  # trimmed to the longest


def test_batches_are_deterministic_given_the_generator(synth_task):
    a = [b[0] for b, _ in zip(synth_task.train_batches(torch.Generator().manual_seed(3)), range(5))]
    b = [b[0] for b, _ in zip(synth_task.train_batches(torch.Generator().manual_seed(3)), range(5))]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_batch_size_fallback(tmp_path):
    task = load_task(spec_of({"name": "synthetic", "size": 300}, train={"batch_size": 32}, cache=tmp_path), 0, CPU)
    sizes = [len(i) for i in task._plan(torch.Generator().manual_seed(0))]
    assert max(sizes) == 32 and sum(sizes) == len(task.train_split)


def test_loss_is_label_smoothed_ce_over_non_pad_tokens(synth_task):
    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, src, tin):
            return self.logits

    src, tin, tout = synth_task.probe_batch
    torch.manual_seed(0)
    logits = torch.randn(*tout.shape, synth_task.V)
    eps = 0.1
    synth_task.label_smoothing = eps
    try:
        got = synth_task.loss(Fixed(logits), synth_task.probe_batch)
    finally:
        synth_task.label_smoothing = 0.0
    mask = tout.ne(PAD)
    logp = logits.log_softmax(-1)[mask]
    y = tout[mask]
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    smooth = -logp.mean(1)
    expect = ((1 - eps) * nll + eps * smooth).mean()
    torch.testing.assert_close(got, expect)
    assert mask.sum() < mask.numel()  # the probe batch does contain padding


@pytest.mark.skipif(not (MULTI30K / "train.de.gz").exists(), reason="Multi30k files not available")
def test_real_multi30k_subset(tmp_path):
    s = spec_of({"name": "multi30k", "root": str(MULTI30K.parent), "train": 500, "val": 50, "test": 20, "vocab_size": 500},
                cache=tmp_path)
    d = load_dataset(s, CPU)
    assert len(d.splits["val"]) == 50 and len(d.splits["test"]) == 20
    assert 490 <= len(d.splits["train"]) <= 500
    with gzip.open(MULTI30K / "val.en.gz", "rt", encoding="utf-8") as f:
        val_en = f.read().splitlines()
    assert set(d.splits["val"].tgt_text) <= {x.strip() for x in val_en}  # references are the raw sentences
