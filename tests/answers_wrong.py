"""Plausible wrong answers, as students write them, for tests/test_assignments.py and
tests/test_autograder.py: WRONG, rounds of {part: body} (one student copy each) whose every
answer must fail its part's public and hidden tests, and WRONG_HIDDEN_ONLY, answers only the
hidden tests catch. A body is its lines, or an (old, new) pair that swap() puts into the
reference body."""
from teaching import make_assignment as ma

from answers_correct import MASK_REAL_TOKENS, swap


# Plausible wrong answers: each round is one copy, and every part's tests must catch its answer.
WRONG = [{
    # L_Disc over the masked positions only (what "ELECTRA 15%" does on purpose)
    "joint_loss": ("scored = real_tokens(x, pad_mask)",
                   "scored = torch.zeros_like(x, dtype=torch.bool).scatter("
                   "1, masked.positions, masked.weights > 0)"),
    # a sample equal to the original labelled "replaced": the label is "was in m"
    "corrupt": ["x_hat = torch.where(masked.weights > 0, x_hat, masked.targets)",
                "in_m = torch.zeros_like(x, dtype=torch.bool).scatter("
                "1, masked.positions, masked.weights > 0)",
                "return x.scatter(1, masked.positions, x_hat), in_m"],
    # torch's AdamW rule: bias-corrected moments
    "adam": ["t = float(self.state[params[0]]['step'])",
             "for p, g, m_, v_ in zip(params, grads, m, v):",
             "    m_.mul_(b1).add_(g, alpha=1 - b1)",
             "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
             "    m_hat, v_hat = m_ / (1 - b1 ** t), v_ / (1 - b2 ** t)",
             "    p.sub_(lr * (m_hat / (v_hat.sqrt() + eps) + wd * p))"],
    # the most likely token instead of a sample
    "sample": ["return logits.detach().argmax(-1)"],
    # a sum over the slots instead of the mean
    "mlm_loss": (" / weights.sum().clamp(min=1.0)", ""),
    # k = ceil(0.15 n), a reading the rule does not allow: one too many for most n
    "mask": ("torch.floor(mask_prob * n + 0.5)", "torch.ceil(mask_prob * n)"),
    # D's logit read as "real": the sign of L_Disc flipped
    "disc_loss": ("logits.float(), is_replaced.float()", "-logits.float(), is_replaced.float()"),
    # no 1 / sqrt(d)
    "attention": ("attn_mask=attn_mask,", "attn_mask=attn_mask, scale=1.0,"),
    # the stated rule's depths under the official rule
    "layer_decay": ("i + 1 if rule == \"official\" else i + 2", "i + 2"),
    # the used positions by a scatter of every slot: an unused slot repeating a used position,
    # written after it, unmarks it
    "electra15": ["in_m = torch.zeros_like(scored, dtype=torch.bool).scatter("
                  "1, masked.positions, masked.weights > 0)",
                  "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m,",
                  "                            pad_mask, segment_ids)"],
    # softmax, dropout and scale counted once instead of once per head
    "flops": ("* seq * heads", "* seq"),
}, {
    # x_corrupt by a scatter over every slot, unused ones writing the original token back: an
    # unused slot repeating a used position (after it) undoes the used slot's sample
    "corrupt": ["x_hat = torch.where(masked.weights > 0, x_hat, masked.targets)",
                "x_corrupt = x.scatter(1, masked.positions, x_hat)",
                "return x_corrupt, x_corrupt != x"],
    # positions drawn with replacement, as the official code: a position can fill two slots
    "mask": ("scores.topk(n_slots, dim=1).indices",
             "torch.multinomial(is_real.float(), n_slots, replacement=True, generator=generator)"),
    # torch.multinomial without `generator`: not reproducible from a seed
    "sample": ["p = torch.softmax(logits.detach().float(), dim=-1)",
               "return torch.multinomial(p.reshape(-1, p.shape[-1]), 1).view(p.shape[:-1])"],
    # λ on L_MLM instead of L_Disc
    "joint_loss": ("loss = loss_mlm + self.disc_weight * loss_disc",
                   "loss = self.disc_weight * loss_mlm + loss_disc"),
    # the cross-entropy in the logits' dtype (bf16 stays bf16), cast to float32 at the end
    "mlm_loss": ("logits.float().flatten(0, 1)", "logits.flatten(0, 1)"),
    # through the probability: sigmoid, then F.binary_cross_entropy (sigmoid(17) is 1 in float32)
    "disc_loss": ("F.binary_cross_entropy_with_logits(logits.float(),",
                  "F.binary_cross_entropy(torch.sigmoid(logits.float()),"),
    # dropout on the heads' outputs instead of the attention probabilities: the same mean
    "attention": ["B, T, H = h.shape",
                  "q, k, v = self.qkv(h).view(B, T, 3, self.heads, H // self.heads)"
                  ".permute(2, 0, 3, 1, 4)",
                  "a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
                  "a = F.dropout(a, self.dropout, self.training)",
                  "return self.out(a.transpose(1, 2).reshape(B, T, H))"],
    # the decay applied after the Adam step, to the new θ
    "adam": ["for p, g, m_, v_ in zip(params, grads, m, v):",
             "    m_.mul_(b1).add_(g, alpha=1 - b1)",
             "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
             "    p.addcdiv_(m_, v_.sqrt() + eps, value=-lr)",
             "    p.mul_(1 - lr * wd)"],
    # the block index by startswith over range(L): encoder.blocks.10 reads as block 1
    "layer_decay": ["for name, p in model.named_parameters():",
                    "    depth = L + 2 if name.startswith('head.') else 0 if rule == 'official' "
                    "else 1",
                    "    for i in range(L):",
                    "        if name.startswith(f'encoder.blocks.{i}'):",
                    "            depth = i + 1 if rule == 'official' else i + 2",
                    "            break",
                    "    power = L + 2 - depth",
                    "    g = groups.setdefault(power, {'params': [], 'names': [], "
                    "'lr': lr * decay ** power})",
                    "    g['params'].append(p)",
                    "    g['names'].append(name)"],
    # only the replaced tokens scored, not every position in m
    "electra15": ["return super().discriminate(x, x_corrupt, is_replaced, masked,",
                  "                            scored & is_replaced, pad_mask, segment_ids)"],
    # the scores q . k counted for one head (2 d T) instead of all of them (2 H T)
    "flops": ("+ 2 * hidden * seq                          # q . k",
              "+ 2 * (hidden // heads) * seq              # q . k"),
}, {
    # a run of k neighbouring real tokens from a random start (cyclic): every position as
    # often as the rule's, but not a uniform k-subset
    "mask": [
        *MASK_REAL_TOKENS,
        "positions = torch.zeros(B, n_slots, dtype=torch.long)",
        "weights = torch.zeros(B, n_slots)",
        "x_masked = x.clone()",
        "for b in range(B):",
        "    real = is_real[b].nonzero().flatten()",
        "    n = len(real)",
        "    k = min(max(int(mask_prob * n + 0.5), 1), n, n_slots)",
        "    if k == 0:",
        "        continue",
        "    start = int(torch.randint(0, n, (1,), generator=generator))",
        "    chosen = real[(start + torch.arange(k)) % n]",
        "    positions[b, :k] = chosen",
        "    weights[b, :k] = 1",
        "    u = torch.rand(k, generator=generator)",
        "    rnd = torch.randint(0, n_random or 1, (k,), generator=generator)",
        "    shown = torch.where(u < replace_prob + random_prob, rnd, x[b, chosen])",
        "    x_masked[b, chosen] = torch.where(u < replace_prob, mask_id, shown)",
        "return Masked(x_masked, positions, x.gather(1, positions), weights)"],
    # torch.distributions.Categorical: exact, but from the global RNG, not `generator`
    "sample": ["return torch.distributions.Categorical(logits=logits.detach().float()).sample()"],
    # labels against x_masked instead of x: every [MASK] position looks replaced
    "corrupt": ["x_corrupt = x.clone()",
                "used = masked.weights > 0",
                "rows = torch.arange(x.shape[0])[:, None].expand_as(masked.positions)",
                "x_corrupt[rows[used], masked.positions[used]] = x_hat[used]",
                "return x_corrupt, x_corrupt != masked.x_masked"],
    # the mean of each row's mean
    "mlm_loss": ["nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction='none')",
                 "per_row = (nll * weights).sum(1) / weights.sum(1).clamp(min=1)",
                 "return per_row[weights.sum(1) > 0].mean()"],
    # the paper's two logs of a sigmoid, written out
    "disc_loss": ["p = torch.sigmoid(logits.float())",
                  "y = is_replaced.float()",
                  "loss = -(1 - y) * torch.log(1 - p) - y * torch.log(p)",
                  "return loss.mean() if mask is None else loss[mask].mean()"],
    # dropout on v instead of the probabilities
    "attention": ["B, T, H = h.shape",
                  "q, k, v = self.qkv(h).view(B, T, 3, self.heads, H // self.heads)"
                  ".permute(2, 0, 3, 1, 4)",
                  "v = F.dropout(v, self.dropout, self.training)",
                  "a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
                  "return self.out(a.transpose(1, 2).reshape(B, T, H))"],
    # ε inside the square root
    "adam": ["for p, g, m_, v_ in zip(params, grads, m, v):",
             "    m_.mul_(b1).add_(g, alpha=1 - b1)",
             "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
             "    p.sub_(lr * (m_ / (v_ + eps).sqrt() + wd * p))"],
    # the 1/sqrt(d) scale counted on q (hidden per token) instead of on the scores
    "flops": ("+ (SOFTMAX + DROPOUT + 1) * seq * heads",
              "+ (SOFTMAX + DROPOUT) * seq * heads + hidden"),
    # L_MLM detached in the sum: the same value, but G never trains
    "joint_loss": ("loss = loss_mlm + self.disc_weight * loss_disc",
                   "loss = loss_mlm.detach() + self.disc_weight * loss_disc"),
    # the rate from the depth instead of from L + 2 - depth: the head moves least
    "layer_decay": ('"lr": lr * decay ** power', '"lr": lr * decay ** depth'),
    # unused slots counted: every slot's position scored
    "electra15": ["in_m = torch.zeros_like(scored).scatter(1, masked.positions, True)",
                  "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m,",
                  "                            pad_mask, segment_ids)"],
}, {
    # the log of a softmax: exp underflows to 0 for a target far below the largest logit
    "mlm_loss": ["p = torch.softmax(logits.float(), dim=-1)",
                 "nll = -torch.log(p.gather(-1, targets[..., None]).squeeze(-1))",
                 "return (nll * weights).sum() / weights.sum().clamp(min=1.0)"],
    # the inverse CDF in the logits' dtype: summed in bf16, the CDF has steps of 2^-8 near 1,
    # and the tokens inside a step are never drawn
    "sample": ["cdf = torch.softmax(logits.detach(), dim=-1).cumsum(-1)",
               "u = torch.rand(cdf.shape[:-1] + (1,), generator=generator).to(cdf.dtype)",
               "x_hat = torch.searchsorted(cdf, u, right=True).squeeze(-1)",
               "return x_hat.clamp(max=cdf.shape[-1] - 1)"],
    # L_Disc detached in the sum ("no gradient into G" taken too far): the same value, but D
    # never trains
    "joint_loss": ("loss = loss_mlm + self.disc_weight * loss_disc",
                   "loss = loss_mlm + self.disc_weight * loss_disc.detach()"),
    # x_corrupt by indexing, but the labels by a scatter over every slot: an unused slot
    # repeating a used position, written after it, unmarks it
    "corrupt": ["x_corrupt = x.clone()",
                "used = masked.weights > 0",
                "rows = torch.arange(x.shape[0])[:, None].expand_as(masked.positions)",
                "x_corrupt[rows[used], masked.positions[used]] = x_hat[used]",
                "is_replaced = torch.zeros_like(x, dtype=torch.bool).scatter(",
                "    1, masked.positions, (x_hat != masked.targets) & used)",
                "return x_corrupt, is_replaced"],
    # the moments rebound in the lists instead of updated in place: the optimizer's state
    # stays zero, so every step starts Adam afresh
    "adam": ["for i, (p, g) in enumerate(zip(params, grads)):",
             "    m[i] = b1 * m[i] + (1 - b1) * g",
             "    v[i] = b2 * v[i] + (1 - b2) * g * g",
             "    p.sub_(lr * (m[i] / (v[i].sqrt() + eps) + wd * p))"],
    # the used positions of every row marked in every row (the row index forgotten)
    "electra15": ["in_m = torch.zeros_like(scored, dtype=torch.bool)",
                  "in_m[:, masked.positions[masked.weights > 0]] = True",
                  "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m,",
                  "                            pad_mask, segment_ids)"],
    # k from the row's length T, padding and specials counted: a short row gets too many
    # slots, and the draw then reaches padding
    "mask": ("n = is_real.sum(1)", "n = torch.full((B,), T)"),
    # the mean over all tokens, those outside mask counted as 0
    "disc_loss": ("return (bce * w).sum() / w.sum().clamp(min=1.0)", "return (bce * w).mean()"),
    # 1 / sqrt(H), the model's width, instead of 1 / sqrt(d), a head's
    "attention": ("attn_mask=attn_mask,", "attn_mask=attn_mask, scale=H ** -0.5,"),
    # encoder.proj (the embeddings' projection) grouped with block 0, not with the embeddings
    "layer_decay": [l for line in ma.reference_body("layer_decay") for l in (
        ['    elif name.startswith("encoder.proj."):', "        depth = 1"]
        if line.strip().startswith('elif name.startswith("encoder.blocks.') else []) + [line]],
    # the FFN's width taken as 4 H (the Transformer's) instead of `ffn`
    "flops": [l.replace("2 * hidden * ffn + ffn + GELU * ffn", "2 * hidden * 4 * hidden + 4 * hidden"
                        " + GELU * 4 * hidden").replace("2 * ffn * hidden", "2 * 4 * hidden * hidden")
              for l in ma.reference_body("flops")],
}, {
    # the positions drawn among all tokens: [CLS], [SEP] and padding may be masked
    "mask": (".masked_fill(~is_real, -1.0)", ""),
    # a sample at temperature 0.5: softmax(logits / 0.5), not softmax(logits)
    "sample": ("softmax(logits.detach().float(), dim=-1)",
               "softmax(logits.detach().float() / 0.5, dim=-1)"),
    # "was in m" by indexing: a sample equal to the original counted as replaced
    "corrupt": ["x_corrupt = x.clone()",
                "used = masked.weights > 0",
                "rows = torch.arange(x.shape[0])[:, None].expand_as(masked.positions)",
                "x_corrupt[rows[used], masked.positions[used]] = x_hat[used]",
                "is_replaced = torch.zeros_like(x, dtype=torch.bool)",
                "is_replaced[rows[used], masked.positions[used]] = True",
                "return x_corrupt, is_replaced"],
    # the mean over all K slots, unused ones (weight 0) counted as 0
    "mlm_loss": ("(nll * weights.flatten()).sum() / weights.sum().clamp(min=1.0)",
                 "(nll * weights.flatten()).mean()"),
    # D scores only the positions G filled ([MASK] in x_masked), not every real token
    "joint_loss": ("scored = real_tokens(x, pad_mask)", "scored = masked.x_masked != x"),
}, {
    # [MASK] or kept drawn once per row, not per position: a row's chosen tokens all [MASK] or
    # all kept (the share of [MASK] is still 85 %: only the rows tell)
    "mask": ("u = torch.rand(B, n_slots,", "u = torch.rand(B, 1,"),
    # corrupt handed the original tokens instead of G's samples: x_corrupt is x at every
    # masked position, D never sees a replaced token there
    "joint_loss": ("x_corrupt, is_replaced = corrupt(x, masked, x_hat)",
                   "x_corrupt, is_replaced = corrupt(x, masked, masked.targets)"),
}, {
    # the random tokens (random_prob > 0) drawn without `generator`: a seed no longer gives the
    # same mask
    "mask": ("rnd = torch.randint(0, n_random, (B, n_slots), generator=generator,",
             "rnd = torch.randint(0, n_random, (B, n_slots),"),
}]

# Plausible wrong answers that only the hidden tests catch: the edge cases the public tests
# leave out on purpose (the autograder's hidden tests add them).
WRONG_HIDDEN_ONLY = [{
    # k not capped at n: a row without real tokens (all padding) gets one used slot
    "mask": ("torch.clamp(torch.floor(mask_prob * n + 0.5), min=1).minimum(n)",
             "torch.clamp(torch.floor(mask_prob * n + 0.5), min=1)"),
    # λ written as 50 instead of self.disc_weight: right for ELECTRA's default only
    "joint_loss": ("loss = loss_mlm + self.disc_weight * loss_disc",
                   "loss = loss_mlm + 50 * loss_disc"),
    # the first row's count of used slots taken for every row
    "electra15": ["k = int(masked.weights[0].sum())",
                  "in_m = torch.zeros_like(scored).scatter(1, masked.positions[:, :k], True)",
                  "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m,",
                  "                            pad_mask, segment_ids)"],
}]


def wrong_answers(round_):
    """{part: body} of a round of WRONG or WRONG_HIDDEN_ONLY, its (old, new) pairs swapped into
    the reference bodies."""
    return {part: swap(part, *w) if isinstance(w, tuple) else w for part, w in round_.items()}
