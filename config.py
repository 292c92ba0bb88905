"""The configuration: every hyperparameter of pre-training in one place (paper Table 6).

ELECTRA-Small, Appendix A / Table 6:  12 layers, hidden 256, FFN 1024, 4 heads (head size 64),
embedding 128, generator 1/4 of D's width, 15 % masking, lr 5e-4 with 10k warm-up steps and
linear decay, Adam ε 1e-6, weight decay 0.01, batch 128, 1M steps (BERT-Small: 1.45M).
The ablation fields (objective, generator, two_stage) select the variants of ablations.py.
"""
from dataclasses import asdict, dataclass, field, replace

from objectives import mask_slots
from encoder import EncoderConfig


@dataclass
class Config:
    """Every hyperparameter, in one place. The defaults are ELECTRA-Small (Table 6)."""
    model: str = "electra"          # "electra" (G + D, replaced token detection) | "bert" (MLM)
    objective: str = "electra"      # §3.5 ablations: electra15, replace_mlm, all_tokens_mlm
    generator: str = "mlm"          # "mlm" (§2) | "unigram" (§3.2) | "adversarial" (App. F)
                                    # | "gumbel" (a reviewer's: ablations.GumbelELECTRA)
    # --generator gumbel only: w, the adversarial weight in G's gradient, is 0 (maximum
    # likelihood) for the first gumbel_start of the budget, then rises linearly to gumbel_weight;
    # gumbel_tau: the Gumbel-softmax temperature of the backward (docs/reviewers-questions.md)
    gumbel_tau: float = 1.0
    gumbel_start: float = 0.5
    gumbel_weight: float = 0.5
    two_stage: bool = False         # §3.2: G alone, then D initialised from G with G frozen
    vocab_size: int = 30522         # set from the prepared data's tokenizer
    emb_size: int = 128             # "Embedding Size", shared by G and D (§3.2)
    seq_len: int = 128              # §3.3: sequence length 512 -> 128
    max_len: int = 512              # rows of the position table (fine-tuning may use up to this)
    disc: EncoderConfig = field(default_factory=EncoderConfig)   # 12 x 256, 4 heads, FFN 1024
    gen_size: float = 0.25          # "Generator Size": multiplier of hidden, FFN and heads
    disc_weight: float = 50.0       # λ, the weight of L_Disc (Appendix A)
    mask_prob: float = 0.15         # "Mask percent"
    # optimisation (Table 6)
    batch_size: int = 128
    lr: float = 5e-4
    warmup_frac: float = 0.01       # 10k warm-up steps of 1M, kept as a fraction of any budget
    weight_decay: float = 0.01
    adam_betas: tuple = (0.9, 0.999)
    adam_eps: float = 1e-6
    optimizer: str = "official"     # Adam without bias correction, as the paper (optim.py)
    grad_clip: float = 1.0
    fused_mlm: bool = True          # G's output, L_MLM and x̂ in one pass
                                    # (machinery/mlm_output.py); False: the plain
                                    # objectives.sample and mlm_loss
    train_steps: int = 1_000_000    # "Train Steps" (BERT-Small: 1.45M, for equal FLOPs)

    @property
    def gen(self) -> EncoderConfig:
        """G: D's depth, `gen_size` of its width (1/4: hidden 64, FFN 256, one head)."""
        d, s = self.disc, self.gen_size
        return EncoderConfig(hidden=int(d.hidden * s), layers=d.layers,
                             heads=max(1, int(d.heads * s)), ffn=int(d.ffn * s), dropout=d.dropout)

    @property
    def n_slots(self) -> int:
        return mask_slots(self.seq_len, self.mask_prob)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["disc"] = EncoderConfig(**d["disc"])
        d["adam_betas"] = tuple(d["adam_betas"])
        d.setdefault("optimizer", "torch")      # checkpoints from before optim.py used AdamW
        return cls(**d)


# Other shapes, same code paths. "mini": ELECTRA-Small's recipe at half the width and a third
# of the depth, batch 32 - about 30x less compute per step, for real-text experiments on a
# CPU. "tiny": for tests and smoke runs only (~1000x less compute).
SIZES = {"small": {},
         # "laptop": the recipe for watching D learn on 2 CPU cores
         # (docs/plateau.md). D one block of 128 (4 heads); G 1/16 of D's width (hidden 8,
         # one head, same depth); 16-token sequences in batches of 256; lr 2e-3 with 2 %
         # warm-up; no dropout (a run this short underfits); torch's AdamW. Each choice was
         # measured (docs/results.md):
         # - D can flag a replaced word only once it attends to its neighbours, and a fresh
         #   Transformer attends evenly to all positions for thousands of steps. 16 tokens
         #   dilute that even spread less than 32 (positions 16+ stay untrained).
         # - G must not learn word order first: then its samples fit their neighbours and D
         #   has nothing to flag (Appendix G). With G at 1/4 of D, G attended to its
         #   neighbours and D caught 0 % after 2,100 steps; at 1/16, G still read a bag of
         #   words, D learnt to look at the next and previous token and caught 4-20 %.
         # - One block, not two: at step 2,200 of a 10-minute run one block caught 29-32 % of
         #   the replaced tokens, two blocks 3 %, and a step costs 1.4x less.
         #   A wider FFN or block, lr 3e-3, batch 128 or 512, a 4k or 16k vocabulary, 25 %
         #   masking, G at 1/8 or 1/32 did no better in 10 minutes; 8 heads were within a
         #   seed's spread of 4.
         # - Four heads, not two: as D escapes, each head locks onto one offset. Two heads
         #   sometimes both went right (+1 and +2) and D never saw the word before a replaced
         #   one: 27 % on wiki2021-00. Four heads read both sides there: 43 %, and 43-48 % on the
         #   two other texts tried (2 heads: 42-47 %).
         # - AdamW: without bias correction the first ~1000 steps are several times larger
         #   (optim.py), which the paper's 10k warm-up steps absorb but a 40-step warm-up does
         #   not - D's hidden states collapse to one vector and it never leaves the plateau.
         # Pair it with a smaller vocabulary: `data.py --vocab_size 8192` halves the step time.
         "laptop": dict(batch_size=256, seq_len=16, lr=2e-3, warmup_frac=0.02, optimizer="torch",
                        gen_size=0.0625,
                        disc=EncoderConfig(hidden=128, layers=1, heads=4, ffn=512, dropout=0.0)),
         "mini": dict(batch_size=32, disc=EncoderConfig(hidden=128, layers=4, heads=2, ffn=512)),
         "tiny": dict(emb_size=32, seq_len=64, max_len=64, batch_size=16, lr=2e-3,
                      disc=EncoderConfig(hidden=64, layers=2, heads=2, ffn=128))}


# "laptop_deep": `laptop` with two blocks of D (and so of G), for runs of an hour or more. On
# Wikipedia one block stops at 43-45 % recall however long it runs (on the books it passed 50 %
# at step 4,400 of `--max_steps 7000`); two blocks passed 50 % after 17 minutes on both cores
# (once) and after 55-57 minutes on one core in all three runs on Wikipedia (two shards, one
# with two seeds), but peaked at 47.9 % on the books, where G improved fastest.
# They leave the plateau later and at a less predictable step (about 1,500-6,500 in seven runs,
# against 1,600-3,000 for one block), and that step decides the time; the run that left it last
# ended at 40.7 % after 45 minutes on both cores (docs/results.md).
SIZES["laptop_deep"] = dict(SIZES["laptop"], disc=replace(SIZES["laptop"]["disc"], layers=2))

# The vocabulary the built-in demo corpus is prepared with when a run gives no --data: the
# laptop recipes' D is one block of 128, so a 30,522-token vocabulary would make 95 % of its
# parameters embeddings and halve its steps/s; 8,192 is what their figures were measured with.
# Every other size gets the paper's 30,522.
DEMO_VOCAB = {"laptop": 8192, "laptop_deep": 8192}


def lr_at(progress, cfg):
    """Linear warm-up multiplied into a linear decay to 0, as the official code; `progress` is
    the elapsed fraction of the budget (of steps, or of wall-clock time with --hours)."""
    return cfg.lr * min(1.0, progress / cfg.warmup_frac) * max(0.0, 1.0 - progress)
