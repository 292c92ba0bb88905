"""Every hyperparameter of pre-training in one place (paper Table 6).

The paper's ELECTRA-Small (Appendix A, Table 6): 12 layers, hidden 256, FFN 1024, 4 heads,
embedding 128, G at 1/4 of D's width, 15 % masking, $λ = 50$ (on the losses' means:
objectives.py), lr 5e-4 with 10k warm-up steps
and linear decay, Adam (β 0.9, 0.999, ε 1e-6), weight decay 0.01, batch 128, 1M steps
(BERT-Small: 1.45M). The ablation fields select the variants of ablations.py; SIZES holds this
project's smaller recipes for CPUs, which are not the paper's.
"""
from dataclasses import asdict, dataclass, field, replace

from objectives import mask_slots
from encoder import EncoderConfig


@dataclass
class Config:
    """The defaults are ELECTRA-Small (Table 6)."""
    model: str = "electra"          # "electra" (G + D, replaced token detection) | "bert" (MLM)
    objective: str = "electra"      # §3.5 ablations: electra15, replace_mlm, all_tokens_mlm
    generator: str = "mlm"          # "mlm" (§2) | "unigram" (§3.2) | "adversarial" (App. F)
                                    # | "gumbel" (a blog review's idea: ablations.GumbelELECTRA)
    # `--generator gumbel` only, not the paper's (ablations.GumbelELECTRA).
    #
    # Details: w, the adversarial weight in G's gradient, 0 until gumbel_start of the budget,
    # then linearly up to gumbel_weight (ablations.gumbel_weight); gumbel_tau: the
    # Gumbel-softmax temperature of the backward.
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
    optimizer: str = "official"     # the official code's Adam, no bias correction (optim.py)
    grad_clip: float = 1.0
    fused_mlm: bool = True          # G's output, L_MLM and x̂ in one pass
                                    # (machinery/mlm_output.py); False: the plain
                                    # objectives.sample and mlm_loss
    train_steps: int = 1_000_000    # "Train Steps" (BERT-Small: 1.45M, for equal FLOPs)

    @property
    def gen(self) -> EncoderConfig:
        """G: D's depth, `gen_size` of its width (generator.py)."""
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


# This project's smaller shapes, same code paths, none of them the paper's.
#
# Details: "laptop" below; "mini" (half the width, a third of the depth, batch 32) and "tiny",
# for tests.
#
# Engineering: per step "mini" costs about 8x less compute than "small" by the paper's count
# (Appendix E, flops.py), about 29x less without its dense embedding lookups (both with the
# 30,522-token vocabulary).
SIZES = {"small": {},
         # "laptop": this project's recipe for watching D learn on 2 CPU cores
         # (docs/plateau.md), each choice measured (docs/results.md). D one block of 128 (4
         # heads); G 1/16 of D's width; 16-token sequences, batches of 256; lr 2e-3, 2 %
         # warm-up; no dropout; torch's AdamW.
         # - D can flag a replaced word only once it attends to its neighbours, and a fresh
         #   Transformer attends evenly everywhere for thousands of steps: 16 tokens dilute
         #   that less than 32.
         # - G must not be too good at reading its neighbours, or its samples fit them and D
         #   has nothing to flag: at 1/4 of D's width D caught 0 % after 2,100 steps, at 1/16
         #   4-20 %. (The paper, §3.2, speculates that too strong a generator "may pose a
         #   too-challenging task for the discriminator"; the neighbours are this project's
         #   observation.)
         # - One block: at step 2,200 one block caught 29-32 %, two blocks 3 %. Four heads:
         #   with two, both sometimes read the words after a replaced one, never the one
         #   before (27 % against 43 %).
         # - AdamW: without bias correction the first ~1,000 steps are several times larger
         #   (optim.py), which a 40-step warm-up does not absorb: D's hidden states collapse.
         # Pair it with `data.py --vocab_size 8192`, which halves the step time.
         "laptop": dict(batch_size=256, seq_len=16, lr=2e-3, warmup_frac=0.02, optimizer="torch",
                        gen_size=0.0625,
                        disc=EncoderConfig(hidden=128, layers=1, heads=4, ffn=512, dropout=0.0)),
         "mini": dict(batch_size=32, disc=EncoderConfig(hidden=128, layers=4, heads=2, ffn=512)),
         "tiny": dict(emb_size=32, seq_len=64, max_len=64, batch_size=16, lr=2e-3,
                      disc=EncoderConfig(hidden=64, layers=2, heads=2, ffn=128))}


# "laptop_deep": `laptop` with two blocks of D (and so of G), for runs of an hour or more.
#
# Details: on Wikipedia one block stops at 43-45 % recall; two passed 50 % (after 17-57
# minutes) but left the plateau later and less predictably (docs/results.md).
SIZES["laptop_deep"] = dict(SIZES["laptop"], disc=replace(SIZES["laptop"]["disc"], layers=2))

# The demo corpus's vocabulary when a run gives no --data: small for the laptop recipes.
#
# Details: 8,192 for the laptop recipes (with 30,522, 95 % of a one-block D would be
# embeddings), the official 30,522 (configure_pretraining.py) for the others.
DEMO_VOCAB = {"laptop": 8192, "laptop_deep": 8192}


def lr_at(progress, cfg):
    """Linear warm-up multiplied into a linear decay to 0, as the official code
    (model/optimization.py); `progress` is the elapsed fraction of the budget."""
    return cfg.lr * min(1.0, progress / cfg.warmup_frac) * max(0.0, 1.0 - progress)
