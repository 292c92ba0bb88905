import base64
import lzma
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machinery.tokenizer import SPECIAL_TOKENS, Tokenizer, _TRAIN_PAT, train_bpe  # noqa: E402

CORPUS = Path("/work/shared/data/corpus")

SAMPLE = [
    "The quick brown fox jumps over the lazy dog. The dog didn't care; it's lazy.",
    "In 2015 the encyclopedia had 4,900,000 articles, and they're still growing.",
    "Café, naïve, résumé and façade keep their accents in the encoder's output.",
    "東京は日本の首都です。 北京是中国的首都。 Emoji too: 🎉🚀👍🏽",
    "    indented code_block(x, y)  # with_underscores and   runs of   spaces\n\n\ttabs",
] * 20

ROUNDTRIP = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé àçcénts, Ελληνικά, русский, 中文字符, 日本語, 한국어",
    "emoji 🎉 with skin tone 👍🏽 and flag 🇫🇷 and ZWJ 👩‍👩‍👧",
    "   leading and trailing spaces   ",
    "line one\nline two\r\n\n\nline five\t\ttabbed",
    "\n\n\n",
    "",
    "punctuation!!! ??? ... --- ___ $$$ 3.14159 1e-9",
    "[MASK] [CLS] [SEP] [PAD] as plain text",
]


@pytest.fixture(scope="module")
def ranks():
    return train_bpe(SAMPLE, 400)


@pytest.fixture(scope="module")
def tok(ranks):
    return Tokenizer(ranks)


@pytest.mark.parametrize("text", ROUNDTRIP)
def test_encode_decode_roundtrip(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < len(tok.ranks) for i in ids)
    assert tok.decode(ids) == text


def test_encode_batch_matches_encode(tok):
    assert tok.encode_batch(ROUNDTRIP, num_threads=2) == [tok.encode(t) for t in ROUNDTRIP]


def test_learned_merges_are_used(tok):
    # "The quick" is in the training text: it must encode to far fewer ids than bytes.
    text = "The quick brown fox jumps over the lazy dog."
    assert len(tok.encode(text)) <= len(text) // 3


def test_special_tokens(tok, ranks):
    n = len(ranks)
    assert tok.special_ids == [n, n + 1, n + 2, n + 3]
    assert [tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id] == tok.special_ids
    assert tok.vocab_size == n + 4
    for i, s in zip(tok.special_ids, SPECIAL_TOKENS):
        assert tok.decode([i]) == s
    ids = tok.encode("a [MASK] b")
    assert not set(ids) & set(tok.special_ids)
    assert tok.decode([tok.cls_id, *tok.encode("hi"), tok.sep_id]) == "[CLS]hi[SEP]"


def test_train_is_well_formed(ranks):
    assert len(ranks) == 400
    assert ranks[:256] == [bytes([i]) for i in range(256)]
    assert len(set(ranks)) == len(ranks)
    for r, t in enumerate(ranks[256:], 256):
        earlier = set(ranks[:r])
        assert any(t[:k] in earlier and t[k:] in earlier for k in range(1, len(t))), t


def test_train_is_deterministic(ranks):
    assert train_bpe(SAMPLE, 400) == ranks
    # Also across processes with different string-hash seeds.
    code = ("import ast, sys; sys.path.insert(0, sys.argv[1]); from machinery.tokenizer import train_bpe; "
            "print(train_bpe(ast.literal_eval(sys.stdin.read()), 400))")
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code, str(ROOT)], input=repr(SAMPLE),
                                env=env, capture_output=True, text=True, check=True).stdout)
    assert outs == {repr(ranks) + "\n"}


def test_merge_order_by_hand():
    # Chunks: "abab" x1, " abab" x1, " cd" x1.
    # Pair counts: (a,b)=4, (b,a)=2, others 1 -> "ab" first. Then (ab,ab)=2 -> "abab".
    # Then three pairs tie at 1; ties go to the smallest bytes: (" ", "abab") < (" ", "c")
    # < ("c", "d"); after " c" is merged, (" c", "d") -> " cd". Then nothing is left, so
    # training stops early with 5 merges even though 300 ranks were asked for.
    ranks = train_bpe(["abab abab cd"], 300)
    assert ranks[256:] == [b"ab", b"abab", b" abab", b" c", b" cd"]


def _naive_bpe(texts, n_ranks):
    """Reference: recount every pair from scratch for every merge."""
    words = Counter()
    for t in texts:
        for chunk in _TRAIN_PAT.findall(t):
            words[tuple(bytes([b]) for b in chunk.encode())] += 1
    ranks = [bytes([i]) for i in range(256)]
    while len(ranks) < n_ranks:
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        if a + b not in ranks:
            ranks.append(a + b)
        merged = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return ranks


def test_matches_naive_reference():
    texts = SAMPLE[:5] + ["aaaa aaaaa aaa", "abcabc bcabca cabcab"]
    assert train_bpe(texts, 450) == _naive_bpe(texts, 450)


def test_train_rejects_tiny_vocab():
    with pytest.raises(ValueError):
        train_bpe(["abc"], 100)


def test_text_roundtrip(tok):
    text = tok.to_text()
    lines = text.splitlines()
    assert len(lines) == len(tok.ranks)
    assert lines[65] == f"{base64.b64encode(b'A').decode()} 65"
    tok2 = Tokenizer.from_text(text)
    assert tok2.ranks == tok.ranks and tok2.vocab_size == tok.vocab_size
    assert tok2.to_text() == text
    assert tok2.encode(ROUNDTRIP[2]) == tok.encode(ROUNDTRIP[2])


def test_save_load(tok, tmp_path):
    path = tmp_path / "tok.tiktoken"
    tok.save(path)
    assert not os.path.exists(str(path) + ".tmp")
    tok2 = Tokenizer.load(path)
    assert tok2.ranks == tok.ranks
    assert tok2.to_text() == tok.to_text()


def _corrupt(text, i, line):
    lines = text.splitlines()
    lines[i] = line
    return "\n".join(lines)


@pytest.mark.parametrize("make_bad", [
    lambda t: "this is not a tokenizer",
    lambda t: "",
    lambda t: t.replace(" 300\n", " 301\n"),              # rank out of order
    lambda t: _corrupt(t, 300, "!!!notbase64!!! 300"),    # bad base64
    lambda t: _corrupt(t, 300, "YQ== three"),             # bad rank
    lambda t: _corrupt(t, 300, "YQ== 300 extra"),         # wrong field count
    lambda t: _corrupt(t, 300, "YQ== 300"),               # duplicate token b"a"
    lambda t: "\n".join(t.splitlines()[:100]),            # missing single bytes
    lambda t: _corrupt(t, 65, f"{base64.b64encode(b'B').decode()} 65"),  # byte 65 != b"A"
])
def test_from_text_rejects_garbage(tok, make_bad):
    with pytest.raises(ValueError):
        Tokenizer.from_text(make_bad(tok.to_text()))


def test_prefix_of_ranks_is_a_tokenizer(ranks):
    small = Tokenizer(ranks[:300])
    assert small.vocab_size == 304 and small.mask_id == 303
    for text in ROUNDTRIP:
        ids = small.encode(text)
        assert max(ids, default=0) < 300
        assert small.decode(ids) == text


def _read_lines(path, nbytes):
    out, n = [], 0
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(line)
            n += len(line.encode())
            if n >= nbytes:
                break
    return out


@pytest.mark.skipif(not CORPUS.is_dir() or not list(CORPUS.glob("*.txt.xz")),
                    reason=f"real-text corpus not found at {CORPUS}")
def test_compresses_real_text():
    lines = _read_lines(sorted(CORPUS.glob("*.txt.xz"))[0], 400_000)
    train, held_out = lines[: len(lines) * 3 // 4], lines[len(lines) * 3 // 4:]
    tok = Tokenizer(train_bpe(train, 1000))
    text = "".join(held_out)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    # Bytes alone would be 1 id per byte; 1000 ranks of English give ~3 bytes/token.
    assert len(ids) < 0.5 * len(text.encode())
