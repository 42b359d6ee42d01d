"""Translation datasets: `multi30k`, `text_pairs`, `synthetic` (docs/experiment-file.md).

Each loader returns a `TextData`: raw sentences (the references of BLEU) and
subword ids as padded tensors on the training device, per split. The
tokenizer is one joint sentencepiece model (BPE by default, or unigram) trained
on the training split (source and target sentences), cached in
``cache_dir()/spm`` under a hash of its training text, type and vocabulary
size, so it is trained once per machine. Ids: pad 0, unk 1, bos 2, eos 3.

Sources are ``tokens + EOS``; targets are ``BOS + tokens + EOS`` (the model
reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``). Training pairs with an
empty side or more than `max_len` subword tokens on either side are dropped;
validation and test pairs are kept (truncated to `max_len` for the model) so
BLEU always scores every reference. Subsets are deterministic given
`split_seed`.
"""
from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from nas_stab.data.base import DataInfo, cache_dir, resolve_root
from nas_stab.data.safeio import read_capped
from nas_stab.errors import DataError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPLITS = ("train", "val", "test")
TOKENIZER_VERSION = "1"

__all__ = ["TextData", "Split", "read_lines", "train_tokenizer", "synthetic_pairs", "PAD", "UNK", "BOS", "EOS"]


# ---------------------------------------------------------------- containers


@dataclass
class Split:
    """One split: padded id tensors plus the raw sentences."""

    src: torch.Tensor  # [N, S] long: tokens + EOS, right-padded
    tgt: torch.Tensor  # [N, T] long: BOS + tokens + EOS, right-padded
    src_len: torch.Tensor  # [N] tokens in src (incl. EOS)
    tgt_len: torch.Tensor  # [N] predicted target tokens (tokens + EOS)
    src_text: list[str]
    tgt_text: list[str]

    def __len__(self) -> int:
        return len(self.src_text)

    def to(self, device) -> Split:
        for k in ("src", "tgt", "src_len", "tgt_len"):
            setattr(self, k, getattr(self, k).to(device))
        return self


class Tokenizer(Protocol):
    """What TextData asks of its sentencepiece.SentencePieceProcessor."""

    def decode(self, ids: list[list[int]]) -> list[str]: ...

    def encode(self, lines: list[str]) -> list[list[int]]: ...


@dataclass
class TextData:
    info: DataInfo
    sp: Tokenizer  # sentencepiece.SentencePieceProcessor
    splits: dict[str, Split] = field(default_factory=dict)
    note: str = ""

    def to(self, device) -> TextData:
        for s in self.splits.values():
            s.to(device)
        return self

    def detokenize(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids)

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self.sp.encode(lines)


# ---------------------------------------------------------------- files


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (gzipped if it ends in .gz); DataError naming the file."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                text = read_capped(f, str(path)).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.strip() for ln in lines]


def _find(candidates: list[Path], what: str) -> Path:
    for p in candidates:
        if p.is_file():
            return p
    looked = ", ".join(str(p) for p in candidates)
    raise DataError(f"{what} not found; looked for {looked}")


def _read_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    s, t = read_lines(src_path), read_lines(tgt_path)
    if len(s) != len(t):
        raise DataError(f"{src_path} has {len(s)} lines but {tgt_path} has {len(t)}; the two sides must align line by line")
    if not s:
        raise DataError(f"{src_path}: no sentences")
    return s, t


def _subset(pair: tuple[list[str], list[str]], n: int | None, seed: int, salt: int) -> tuple[list[str], list[str]]:
    """The first n pairs of a permutation fixed by (seed, salt); all of them (in order) when n is None."""
    s, t = pair
    if n is None or n >= len(s):
        return s, t
    g = torch.Generator().manual_seed(seed * 1000 + salt)
    idx = torch.randperm(len(s), generator=g)[:n].sort().values.tolist()
    return [s[i] for i in idx], [t[i] for i in idx]


# ---------------------------------------------------------------- tokenizer


def train_tokenizer(src: list[str], tgt: list[str], vocab_size: int, kind: str = "bpe", cache: Path | None = None):
    """A joint sentencepiece model on the training sentences, cached by content hash.

    `vocab_size` is a soft limit: a small corpus gets the largest vocabulary
    it supports.
    """
    import sentencepiece as spm  # deferred: loads SentencePiece only when this runs

    h = hashlib.sha256()
    h.update(f"v{TOKENIZER_VERSION}|{kind}|{vocab_size}|".encode())
    for side in (src, tgt):
        h.update("\n".join(side).encode("utf-8"))
        h.update(b"\x00")
    path = None
    if cache is not None:
        d = cache / "spm"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{kind}{vocab_size}-{h.hexdigest()[:20]}.model"
        if path.is_file():
            return spm.SentencePieceProcessor(model_file=str(path))
    with contextlib.ExitStack() as held:
        if path is not None:
            lock = held.enter_context(open(str(path) + ".lock", "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)  # one trainer per model; the others wait and read it
            if path.is_file():
                return spm.SentencePieceProcessor(model_file=str(path))
        buf = io.BytesIO()
        lines = [x for x in src + tgt if x]
        if not lines:
            raise DataError("the training split has no sentences to train the tokenizer on")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size, model_type=kind,
            pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, character_coverage=1.0,
            hard_vocab_limit=False, num_threads=1, minloglevel=2, input_sentence_size=2_000_000,
            shuffle_input_sentence=False,
        )
        proto = buf.getvalue()
        if path is not None:
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(proto)
            os.replace(tmp, path)
        return spm.SentencePieceProcessor(model_proto=proto)


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    n, m = len(seqs), max((len(s) for s in seqs), default=1)
    out = torch.full((n, max(m, 1)), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def _encode_split(sp, src: list[str], tgt: list[str], max_len: int, train: bool) -> tuple[Split, int]:
    s_ids, t_ids = sp.encode(src), sp.encode(tgt)
    keep_s, keep_t, ss, tt = [], [], [], []
    dropped = 0
    for a, b, x, y in zip(s_ids, t_ids, src, tgt):
        if train and (not a or not b or len(a) > max_len or len(b) > max_len):
            dropped += 1
            continue
        ss.append(a[:max_len] + [EOS])
        tt.append([BOS] + b[:max_len] + [EOS])
        keep_s.append(x)
        keep_t.append(y)
    split = Split(_pad(ss), _pad(tt), torch.tensor([len(a) for a in ss]), torch.tensor([len(b) - 1 for b in tt]), keep_s, keep_t)
    return split, dropped


def build_text_data(cfg, name: str, pairs: dict[str, tuple[list[str], list[str]]], device, source: str = "") -> TextData:
    """Train (or load) the tokenizer on pairs['train'] and encode every split."""
    train = pairs["train"]
    o = cfg.options  # catalog.TranslationOptions (or a class extending it)
    sp = train_tokenizer(train[0], train[1], o.vocab_size, o.tokenizer, cache_dir(cfg))
    splits, notes = {}, []
    for k in SPLITS:
        if k not in pairs:
            continue
        split, dropped = _encode_split(sp, pairs[k][0], pairs[k][1], o.max_len, train=k == "train")
        if len(split) == 0:
            raise DataError(f"{name}: the {k} split is empty after dropping pairs longer than max_len={o.max_len}")
        splits[k] = split
        notes.append(f"{len(split)} {k}" + (f" ({dropped} dropped: empty or > {o.max_len} tokens)" if dropped else ""))
    V = sp.get_piece_size()
    info = DataInfo(name, (), V, {"vocab": V, "src_vocab": V, "tgt_vocab": V, "pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS,
                                  "src": o.src, "tgt": o.tgt, "tokenizer": f"sentencepiece {o.tokenizer}"})
    note = f"{source}: " if source else ""
    return TextData(info, sp, splits, note + ", ".join(notes) + f"; joint vocabulary {V}").to(device)


def _carve(pair, val: int | None, seed: int, frac: float = 0.05):
    """Split a training pool into train/val deterministically (when no val files exist)."""
    s, t = pair
    n = len(s)
    nv = val if val is not None else max(1, int(round(frac * n)))
    if nv >= n:
        raise DataError(f"{n} training pairs cannot give a validation subset of {nv}")
    g = torch.Generator().manual_seed(seed * 1000 + 7)
    perm = torch.randperm(n, generator=g).tolist()
    vi, ti = sorted(perm[:nv]), sorted(perm[nv:])
    return ([s[i] for i in ti], [t[i] for i in ti]), ([s[i] for i in vi], [t[i] for i in vi])


# ---------------------------------------------------------------- multi30k


MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def _multi30k_file(root: Path, stem: str, lang: str) -> Path:
    dirs = [root, root / "multi30k"]
    return _find([d / f"{stem}.{lang}{ext}" for d in dirs for ext in ("", ".gz")], f"multi30k file {stem}.{lang}[.gz]")


def load_multi30k(cfg, device):
    root = resolve_root(cfg.root)
    o = cfg.options  # catalog.TranslationOptions
    pairs = {}
    for k, stem in MULTI30K_SPLITS.items():
        p = _read_pair(_multi30k_file(root, stem, o.src), _multi30k_file(root, stem, o.tgt))
        pairs[k] = _subset(p, getattr(cfg, k), cfg.split_seed, salt=SPLITS.index(k))
    return build_text_data(cfg, "multi30k", pairs, device, f"multi30k {o.src}-{o.tgt}")


# ---------------------------------------------------------------- text_pairs


def _user_path(root: Path, p: str) -> Path:
    q = Path(os.path.expanduser(p))
    if q.is_absolute():
        return q
    cands = [root / q, Path.cwd() / q]
    for c in cands:
        if c.is_file():
            return c
    raise DataError(f"text_pairs file {p} not found; looked for {', '.join(str(c) for c in cands)}")


def load_text_pairs(cfg, device):
    root = resolve_root(cfg.root)
    o = cfg.options  # catalog.TextPairsOptions
    train = _read_pair(_user_path(root, o.train_src), _user_path(root, o.train_tgt))
    pairs = {}
    if o.val_src is not None:
        val = _read_pair(_user_path(root, o.val_src), _user_path(root, o.val_tgt))
        pairs["val"] = _subset(val, cfg.val, cfg.split_seed, 1)
    else:
        train, val = _carve(train, cfg.val, cfg.split_seed)
        pairs["val"] = val
    pairs["train"] = _subset(train, cfg.train, cfg.split_seed, 0)
    if o.test_src is not None:
        test = _read_pair(_user_path(root, o.test_src), _user_path(root, o.test_tgt))
        pairs["test"] = _subset(test, cfg.test, cfg.split_seed, 2)
    return build_text_data(cfg, "text_pairs", pairs, device, f"text_pairs {o.train_src}")


# ---------------------------------------------------------------- synthetic


_NOUNS = ["cat", "dog", "bird", "horse", "teacher", "farmer", "doctor", "boy", "girl", "king", "queen", "baker",
          "sailor", "painter", "rabbit", "lion"]
_ADJS = ["big", "small", "red", "old", "young", "happy", "tall", "green", "quiet", "brave"]
_VERBS = ["see", "like", "follow", "feed", "help", "call", "find", "watch", "chase", "greet"]
_PREPS = ["near", "behind", "under", "beside", "above"]
_PLACES = ["house", "tree", "river", "bridge", "garden", "market"]
_ADVS = ["today", "often", "slowly", "again"]


def _lexicon() -> dict[str, str]:
    """A fixed made-up target vocabulary (independent of any seed)."""
    rng = random.Random(4242)
    cons, vows = "bdfgklmnprstvz", "aeiou"
    used, lex = set(), {}
    for w in _NOUNS + _ADJS + _VERBS + _PREPS + _PLACES + _ADVS:
        while True:
            t = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.choice((2, 2, 3))))
            if t not in used:
                break
        used.add(t)
        lex[w] = t
    return lex


def synthetic_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """n sentence pairs from a small grammar; the target reorders (SOV, noun-adjective, postpositions).

    Source: ``DET ADJ* NOUN VERB DET ADJ* NOUN [PREP the PLACE] [ADV]``, with
    number agreement (plural nouns take -s; a singular subject takes verb-s).
    Target: ``[ADV] NP_subj NP_obj [PLACE lo PREP] VERB`` where an NP is
    ``NOUN [ta] ADJ* DET`` (adjectives reversed, the plural marker `ta`, the
    determiner last) and the verb takes the suffix -i with a plural subject.
    Deterministic given (n, seed); learnable exactly.
    """
    lex = _lexicon()
    rng = random.Random(seed)
    det_t = {"the": "lo", "a": "na", "some": "su"}

    def np_():
        plural = rng.random() < 0.4
        det = rng.choice(["the", "some"] if plural else ["the", "a"])
        adjs = rng.sample(_ADJS, rng.choice((0, 0, 1, 1, 2)))
        noun = rng.choice(_NOUNS)
        src = [det] + adjs + [noun + ("s" if plural else "")]
        tgt = [lex[noun]] + (["ta"] if plural else []) + [lex[a] for a in reversed(adjs)] + [det_t[det]]
        return src, tgt, plural

    src_out, tgt_out = [], []
    for _ in range(n):
        s_subj, t_subj, pl = np_()
        s_obj, t_obj, _ = np_()
        verb = rng.choice(_VERBS)
        s = s_subj + [verb if pl else verb + "s"] + s_obj
        t_pp, t_adv = [], []
        if rng.random() < 0.5:
            prep, place = rng.choice(_PREPS), rng.choice(_PLACES)
            s += [prep, "the", place]
            t_pp = [lex[place], "lo", lex[prep]]
        if rng.random() < 0.3:
            adv = rng.choice(_ADVS)
            s.append(adv)
            t_adv = [lex[adv]]
        t = t_adv + t_subj + t_obj + t_pp + [lex[verb] + ("i" if pl else "")]
        src_out.append(" ".join(s))
        tgt_out.append(" ".join(t))
    return src_out, tgt_out


def load_synthetic_translation(cfg, device):
    s, t = synthetic_pairs(cfg.options.size, cfg.split_seed)  # catalog.SyntheticTranslationOptions
    n = len(s)
    n_test = cfg.test if cfg.test is not None else max(1, n // 10)
    n_val = cfg.val if cfg.val is not None else max(1, n // 10)
    n_train = cfg.train if cfg.train is not None else n - n_test - n_val
    if n_test + n_val + n_train > n or n_train < 1:
        raise DataError(f"synthetic: {n} pairs (dataset.size) cannot be split into train={n_train}, val={n_val}, test={n_test}")
    parts = {"test": (s[:n_test], t[:n_test]),
             "val": (s[n_test : n_test + n_val], t[n_test : n_test + n_val]),
             "train": (s[n_test + n_val : n_test + n_val + n_train], t[n_test + n_val : n_test + n_val + n_train])}
    return build_text_data(cfg, "synthetic", parts, device, f"synthetic translation (size {n}, seed {cfg.split_seed})")
