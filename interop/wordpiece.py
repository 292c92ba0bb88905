"""BERT's uncased WordPiece tokenizer, which the published ELECTRA models use (§3.1: "Our model
architecture and most hyperparameters are the same as BERT's"; footnote 1: the released
weights; their vocab.txt is BERT's 30,522-token uncased vocabulary).

This project trains its own byte-level BPE (machinery/tokenizer.py). To fine-tune Google's released
checkpoints (interop/hf_import.py) we must cut text exactly as they were pre-trained, i.e. with BERT's
tokenizer and their vocab.txt. It works in two stages, as in BERT's tokenization.py:

1. Basic tokenization turns raw text into "words":
   - clean: drop NUL, U+FFFD and control characters; every whitespace character becomes " ";
   - put spaces around CJK ideographs: Chinese has no spaces, so each character is a word;
   - lower-case, then strip accents (NFD splits "é" into "e" + a combining accent, category
     Mn, which is dropped): the "uncased" models see "Café" and "cafe" as the same word;
   - split off every punctuation character as its own word ("don't" -> "don", "'", "t"),
     where punctuation is Unicode category P* *and* all non-alphanumeric ASCII ("$", "+", "^").
2. WordPiece: each word is cut greedily into the *longest* vocabulary entry from the left, then
   the longest continuation, marked "##" ("unaffable" -> "un", "##aff", "##able"). A word with
   a piece that matches nothing, or longer than 100 characters, becomes one [UNK].

Unlike byte-level BPE this can lose information ([UNK], case, accents); in exchange words are
whole or few pieces. The interface is tokenizer.Tokenizer's, as glue.py and finetune_glue.py use it:
encode, encode_batch, decode, pad_id / cls_id / sep_id / mask_id, vocab_size.

Text that spells a special token ("[MASK]") is cut like any text here, as machinery/tokenizer.py does: data
can never inject special tokens. (transformers' BertTokenizer would map it to the special id.)
"""
import unicodedata
from pathlib import Path

MAX_WORD_CHARS = 100    # BERT's max_input_chars_per_word: longer "words" become [UNK]


def is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch):
    """Control characters are removed. \\t \\n \\r are whitespace instead. (Google's BERT code counts
    categories Cc and Cf; transformers, which we match, every C*: also unassigned and private.)"""
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def is_punctuation(ch):
    """BERT's definition: all non-letter/number ASCII (33-47, 58-64, 91-96, 123-126: e.g. "$",
    "^", "`" are not Unicode punctuation but are split off anyway), plus Unicode category P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp):
    """The CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana: those languages
    write spaces between words)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def strip_accents(word):
    return "".join(c for c in unicodedata.normalize("NFD", word)
                   if unicodedata.category(c) != "Mn")


def split_punctuation(word):
    """"hello,world!" -> ["hello", ",", "world", "!"]."""
    out, start_new = [], True
    for ch in word:
        if is_punctuation(ch):
            out.append(ch)
            start_new = True
        else:
            if start_new:
                out.append("")
            out[-1] += ch
            start_new = False
    return out


def basic_tokenize(text, lower_case=True):
    """Stage 1: raw text -> words (see the module docstring for the rules, in this order)."""
    chars = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        if is_whitespace(ch):
            chars.append(" ")
        elif is_cjk(cp):
            chars.append(f" {ch} ")
        else:
            chars.append(ch)
    # NFC first (as transformers does): one spelling per character, whatever the source used
    text = unicodedata.normalize("NFC", "".join(chars))
    words = []
    for word in text.split():
        if lower_case:                          # the uncased models: lower-case, then no accents
            word = strip_accents(word.lower())
        words += split_punctuation(word)
    return [w for w in words if w]              # stripping may empty a word (a lone accent)


class WordPiece:
    """A vocab.txt (one token per line, id = line number) as a tokenizer with the interface of
    tokenizer.Tokenizer."""

    def __init__(self, tokens, lower_case=True):
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}   # a repeated line: the last wins
        missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if t not in self.vocab]
        if missing:
            raise ValueError(f"vocabulary lacks {', '.join(missing)}")
        self.lower_case = lower_case
        self.pad_id, self.unk_id = self.vocab["[PAD]"], self.vocab["[UNK]"]
        self.cls_id, self.sep_id = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.mask_id = self.vocab.get("[MASK]")
        self.special_ids = [i for i in (self.pad_id, self.cls_id, self.sep_id, self.mask_id)
                            if i is not None]
        self.vocab_size = len(self.tokens)
        self._cache = {}                        # word -> ids: GLUE repeats its words a lot

    @classmethod
    def load(cls, path, lower_case=True):
        # like BERT: strip only the newline; a token is everything else on its line
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()                         # the file's final newline ends the last line
        return cls(lines, lower_case)

    def wordpiece(self, word):
        """Stage 2: greedy longest-match-first. Returns token ids; [UNK] for the whole word if
        it is too long or some remainder matches no "##" piece."""
        if len(word) > MAX_WORD_CHARS:
            return [self.unk_id]
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):       # longest candidate first
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    start = end
                    break
            else:
                return [self.unk_id]
        return ids

    def _word_ids(self, word):
        ids = self._cache.get(word)
        if ids is None:
            ids = self.wordpiece(word)
            if len(self._cache) < 1_000_000:
                self._cache[word] = ids
        return ids

    def encode(self, text):
        return [i for w in basic_tokenize(text, self.lower_case) for i in self._word_ids(w)]

    def encode_batch(self, texts, num_threads=None):
        """Same signature as Tokenizer.encode_batch; pure Python, so one thread."""
        return [self.encode(t) for t in texts]

    def tokenize(self, text):
        """The pieces as strings: "unaffable" -> ["un", "##aff", "##able"]."""
        return [self.tokens[i] for i in self.encode(text)]

    def decode(self, ids):
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return " ".join(self.tokens[int(i)] for i in ids).replace(" ##", "")

    def __repr__(self):
        return f"WordPiece(vocab_size={self.vocab_size}, lower_case={self.lower_case})"
