"""Teaching: the course - the eleven parts, what each asks, their points and the grader's limits.

The one file an instructor edits to change a course: PARTS (each part's title, the paper's
section, its equation, the contract that ASSIGNMENTS.md, the function's docstring and its tests
state alike, the hint a blank body raises and a question to think about), POINTS, when the
hidden tests are shown, and the time limits. teaching/make_assignment.py writes a student copy
and its autograder from them; teaching/grade.py grades by them."""
from dataclasses import dataclass


@dataclass
class Part:
    name: str
    title: str
    where: str          # file: function
    section: str        # the paper's section
    equation: str
    contract: str
    hint: str           # the one line left in the code
    question: str

    @property
    def file(self):
        """The file that holds the part, e.g. objectives.py."""
        return self.where.split(":")[0]


PARTS = [
    # Each part states one contract: the same in ASSIGNMENTS.md (contract), the function's
    # docstring and its test file, which accepts every body the contract allows. The hint is the
    # one line a blank body raises: it says what to compute, never how the reference computes it.
    Part("mask", "Choose the positions to mask", "objectives.py: mask_tokens", "§2, Appendix A",
         "m = k distinct positions drawn uniformly from the n real tokens, k = round(0.15 n);  "
         "x_masked = REPLACE(x, m, [MASK])",
         "x (B, T) ids -> Masked(x_masked, positions (B, K) int64, targets, weights (B, K) "
         "float32): n = the real tokens of a row (never a special token); k = round(mask_prob * "
         "n) to the nearest integer (a tie at .5 either way), at least 1, at most n and K (0 for "
         "a row without real tokens); k distinct positions, uniformly at random, in the first k "
         "of K fixed slots (weight 1.0); the unused slots (weight 0.0) may hold any position, a "
         "used one again included; targets = x at every slot's position; x_masked differs from "
         "x at used positions only, each of which shows [MASK] with probability replace_prob, a "
         "random id below n_random with probability random_prob, else itself (a draw per "
         "position, not an exact share of each row). The same `generator` seed gives the same "
         "mask.",
         "return Masked: per row, k = round(mask_prob * n) of the n real tokens chosen uniformly "
         "at random without repeats, in the first k slots, and x_masked showing [MASK], a random "
         "id or the token itself at them",
         "Why does ELECTRA keep 15 % of the chosen tokens unmasked instead of BERT's 10/10 split?"),
    Part("sample", "Sample from the generator", "objectives.py: sample", "§2",
         "x̂_i ~ p_G(x_i | x_masked) = softmax(logits)  (temperature 1)",
         "logits (..., V) -> int64 ids (...), one exact sample per row of softmax(logits) "
         "whatever the logits' dtype (bf16 too: every token of a large vocabulary reachable), no "
         "gradient, safe for logits as large as ±1000; the same `generator` seed gives the same "
         "samples. Training samples with your function.",
         "return one id per row of logits, drawn with probability softmax(logits), using the "
         "random numbers of `generator`",
         "Why sample at all - what would D learn if G's argmax filled every masked position?"),
    Part("corrupt", "Build x_corrupt and its labels", "objectives.py: corrupt", "§2",
         "x_corrupt = REPLACE(x, m, x̂);  is_replaced_t = 1(x_corrupt_t != x_t)",
         "x (B, T), masked, x_hat (B, K) -> (x_corrupt (B, T), is_replaced (B, T) bool), x left "
         "unchanged. Each used slot's position takes its sample; unused slots change nothing, "
         "whatever position they hold (one a used slot holds included: see Masked); a sample "
         "equal to the original is real.",
         "return x_corrupt, x with each used slot's position holding that slot's sample, and "
         "is_replaced, True where x_corrupt differs from x",
         "Early in training G is almost never right. Late in training it is right ~60 % of the "
         "time. What would labelling by 'was in m' teach D then?"),
    Part("mlm_loss", "L_MLM", "objectives.py: mlm_loss", "§2",
         "L_MLM = E[ sum_{i in m} -log p_G(x_i | x_masked) ]",
         "logits (B, K, V), targets (B, K), weights (B, K) -> scalar: the mean of -log softmax "
         "at the targets over the used slots (weight 1), in float32 whatever the logits' dtype, "
         "accurate for logits as large as ±100 (log of softmax is not: exp(-200) is 0 in "
         "float32). "
         "Train with `electra_small.py --plain_mlm` to use it (else machinery/mlm_output.py "
         "computes L_MLM).",
         "return the mean over the used slots of -log p_G(target), p_G = softmax(logits), as a "
         "float32 scalar",
         "Why average over used slots rather than sum - what would a sum do to λ's meaning?"),
    Part("disc_loss", "L_Disc", "objectives.py: disc_loss", "§2",
         "L_Disc = E[ sum_t -1(x_corrupt_t = x_t) log D(x_corrupt, t) "
         "- 1(x_corrupt_t != x_t) log(1 - D(x_corrupt, t)) ]",
         "logits (B, T) scoring 'replaced' (D(x, t) = 1 - sigmoid(logit)), is_replaced (B, T), "
         "mask (B, T) bool or None -> scalar in float32: the mean over the tokens in mask (all "
         "tokens when None) of the binary cross-entropy, accurate for logits as large as ±100 "
         "(in float32, sigmoid(17) is already 1); tokens outside mask get no gradient.",
         "return the mean over the tokens in `mask` of -log D (real tokens) or -log(1 - D) "
         "(replaced ones), D = 1 - sigmoid(logit), as a float32 scalar",
         "85-90 % of tokens are real. What loss does 'everything is real' already reach, and "
         "why do small runs sit there first (docs/plateau.md)?"),
    Part("joint_loss", "The joint loss L_MLM + λ L_Disc", "objectives.py: ELECTRA.forward",
         "§2, Appendix A",
         "min_{θG, θD} sum_x L_MLM(x, θG) + λ L_Disc(x, θD),  λ = 50",
         "Use self.generate(masked, ...) -> (L_MLM, x̂, stats), corrupt(...) without gradient, "
         "self.discriminate(x, x_corrupt, is_replaced, masked, scored, ...) with `scored` every "
         "real token; set `loss` = L_MLM + λ L_Disc (λ = self.disc_weight; neither term "
         "detached: the trainer back-propagates `loss` into both networks), `loss_mlm`, "
         "`loss_disc`, `stats` and `d_stats`.",
         "set loss = L_MLM + λ L_Disc, where D reads x_corrupt made from G's samples without "
         "gradient and L_Disc scores every real token",
         "The paper does not back-propagate L_Disc into G. Could it? What would G learn?"),
    Part("attention", "Multi-head self-attention", "encoder.py: SelfAttention.forward",
         "§2 (the Transformer encoder)",
         "Attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V, per head, heads concatenated",
         "h (B, T, H) -> (B, T, H) with self.qkv (H -> 3H: q, k, v in that order, head j at "
         "columns j d to (j + 1) d of each), self.heads heads of d = H / heads, attn_mask "
         "(B, 1, 1, T) True where attention is allowed (or None), self.out (H -> H); in "
         "training, dropout self.dropout on the attention probabilities (none in eval).",
         "return out(the heads' softmax(q k^T / sqrt(d)) v, concatenated), with masked keys "
         "getting no attention",
         "Why divide by sqrt(d)? What happens to the softmax's gradient without it?"),
    Part("adam", "Adam without bias correction", "optim.py: AdamWeightDecay.step",
         "Appendix A (the official optimizer)",
         "m <- β1 m + (1-β1) g;  v <- β2 v + (1-β2) g²;  θ <- θ - η (m / (sqrt(v) + ε) + w θ)",
         "Update every tensor in `params` in place from `grads`, the moments `m` and `v` (lists "
         "of tensors, zero at the start, updated in place), with b1, b2, lr, eps, wd; no "
         "division by 1 - β^t.",
         "update m, v and every θ in place by the three lines of the equation, without bias "
         "correction",
         "Is the uncorrected step larger or smaller than AdamW's at step 10? (optim.py)"),
    Part("layer_decay", "Layer-wise learning-rate decay", "finetune_glue.py: layerwise_param_groups",
         "Appendix A, Table 7 (layer-wise LR decay 0.8)",
         "lr(depth) = lr · 0.8^(L + 2 - depth): head L + 2, block i at i + 1, embeddings 0",
         "Fill `groups`: one dict per distinct power, {'params', 'names', 'lr'}, keyed by the "
         "power, every parameter in exactly one; rule 'official' as above (head.* at L + 2, "
         "encoder.blocks.<i>.* at i + 1, everything else - the embeddings and encoder.proj - at "
         "0), rule 'stated' with the head at L + 2 too, block i at i + 2, everything else at 1.",
         "put every parameter in groups[power], power = L + 2 - its depth, with lr * decay ** "
         "power",
         "Why should the lower layers move less during fine-tuning?"),
    Part("electra15", "Ablation: ELECTRA 15%", "ablations.py: ELECTRA15.discriminate", "§3.5",
         "L_Disc summed over i in m only, instead of t = 1..n",
         "Same arguments as ELECTRA.discriminate; call the parent's discriminate with `scored` "
         "narrowed to the positions of the used mask slots (an unused slot may hold a used "
         "slot's position: it must not unmark it).",
         "call the parent's discriminate with `scored` kept only at the positions of the used "
         "slots of m",
         "Table 5: ELECTRA 15% loses most of ELECTRA's gain. Why does scoring all tokens help "
         "so much more than the extra compute would suggest?"),
    Part("flops", "FLOPs of a Transformer block", "flops.py: block_flops", "Appendix E",
         "a matmul of an m-vector by an m x n matrix costs 2mn; elementwise ops by their "
         "operations (LAYER_NORM, GELU, SOFTMAX, DROPOUT per element)",
         "(hidden, heads, ffn, seq) -> the exact FLOPs per token of one post-LN block: q, k, v "
         "with biases, scores, softmax + dropout + 1/sqrt(d) scale on each head's seq scores, "
         "weighted sum, output "
         "projection with bias, FFN (both matmuls with biases, GELU), the two dropout + "
         "residual + LayerNorm.",
         "return the FLOPs per token of one block, every matmul, bias and elementwise operation "
         "of attention and the FFN counted",
         "Which term grows with the sequence length, and at what length does it match the FFN?"),
]
BY_NAME = {p.name: p for p in PARTS}

# Points per part, the one table an instructor edits (or --points mask=10,... for one copy): they
# feed ASSIGNMENTS.md and the autograder's results.json. Of each part's points, HIDDEN_SHARE go
# to its hidden tests, the rest to its public tests; inside each, every test counts the same.
POINTS = {"mask": 12, "sample": 8, "corrupt": 8, "mlm_loss": 6, "disc_loss": 6, "joint_loss": 12,
          "attention": 14, "adam": 10, "layer_decay": 8, "electra15": 8, "flops": 8}
HIDDEN_SHARE = 0.5
# When students see the hidden tests' results (Gradescope's visibility of a test; --shown):
# after the due date (the default), when the instructor publishes the grades, or never.
SHOWN = {"after_due_date": "after the due date",
         "after_published": "when the grades are published",
         "hidden": "never: only the instructor sees them"}
DEFAULT_SHOWN = "after_due_date"
# The grader's time limits, in seconds (teaching/grade.py): each part's tests (public and hidden
# together) may take TIME_LIMIT_S, the start of PyTorch and the tests STARTUP_S, the whole run
# BUDGET_S - under Gradescope's default of 10 minutes, so that results.json is always written.
# A correct part takes at most a few seconds at one core (docs/instructor-notes.md, "Gradescope").
TIME_LIMIT_S = 40
STARTUP_S = 120
BUDGET_S = 540
