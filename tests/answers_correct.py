"""Correct answers other than the reference, as students write them, for
tests/test_assignments.py: ALTERNATIVES, rounds of {part: body} (one student copy each, a body
being its lines), every one of which must pass the part's public and hidden tests; and the
helpers that build a body from the reference (swap) or share its first lines
(MASK_REAL_TOKENS), which tests/answers_wrong.py uses too."""
from teaching import make_assignment as ma

def torch_round_mask():
    """Part 1 with k = torch.round(0.15 n) - round half to even, where the reference rounds
    half up: at n = 30, 70, 110 real tokens the two differ by one, and the rule allows both."""
    body = [l.replace("torch.floor(mask_prob * n + 0.5)", "torch.round(mask_prob * n)")
            for l in ma.reference_body("mask")]
    assert body != ma.reference_body("mask")
    return body


def swap(part, old, new):
    """The reference body of part with `old` replaced by `new` (which must occur)."""
    ref = ma.reference_body(part)
    body = [l.replace(old, new) for l in ref]
    assert body != ref, (part, old)
    return body


# How a student's Part 1 often begins: the real tokens by a loop over the special ids (three
# bodies below, right and wrong, start so).
MASK_REAL_TOKENS = [
    "B, T = x.shape",
    "is_real = torch.ones_like(x, dtype=torch.bool)",
    "for s in special_ids:",
    "    is_real &= x != s",
]


# Correct answers other than the reference, as students write them: each round is one student
# copy with these parts blank and filled in, and every test of theirs must pass.
ALTERNATIVES = [{
    # a per-row randperm; unused slots repeat the first chosen position (Masked allows it)
    "mask": [
        *MASK_REAL_TOKENS,
        "positions = torch.zeros(B, n_slots, dtype=torch.long)",
        "weights = torch.zeros(B, n_slots)",
        "x_masked = x.clone()",
        "u = torch.rand(B, n_slots, generator=generator)",
        "rnd = torch.randint(0, n_random or 1, (B, n_slots), generator=generator)",
        "for b in range(B):",
        "    real = is_real[b].nonzero().flatten()",
        "    k = min(max(int(mask_prob * len(real) + 0.5), 1), len(real), n_slots)",
        "    chosen = real[torch.randperm(len(real), generator=generator)[:k]]",
        "    positions[b, :k] = chosen",
        "    positions[b, k:] = chosen[0] if k else 0",
        "    weights[b, :k] = 1.0",
        "    shown = torch.where(u[b, :k] < replace_prob + random_prob, rnd[b, :k], x[b, chosen])",
        "    x_masked[b, chosen] = torch.where(u[b, :k] < replace_prob, mask_id, shown)",
        "return Masked(x_masked, positions, x.gather(1, positions), weights)"],
    # the Gumbel-max trick, not the inverse CDF
    "sample": [
        "u = torch.rand(logits.shape, generator=generator).clamp(1e-12, 1 - 1e-7)",
        "return (logits.detach().float() - torch.log(-torch.log(u))).argmax(-1)"],
    # indexing instead of a scatter: only the used slots write
    "corrupt": [
        "x_corrupt = x.clone()",
        "used = masked.weights > 0",
        "rows = torch.arange(x.shape[0])[:, None].expand_as(masked.positions)",
        "x_corrupt[rows[used], masked.positions[used]] = x_hat[used]",
        "return x_corrupt, x_corrupt != x"],
    # log-softmax and gather instead of F.cross_entropy
    "mlm_loss": [
        "log_p = torch.log_softmax(logits.float(), dim=-1)",
        "nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)",
        "return (nll * weights).sum() / weights.sum()"],
    # L_Disc written out as the paper's two terms, D = 1 - sigmoid(logit) = sigmoid(-logit)
    "disc_loss": [
        "z, rep = logits.float(), is_replaced.float()",
        "loss = -(1 - rep) * F.logsigmoid(-z) - rep * F.logsigmoid(z)",
        "return loss.mean() if mask is None else loss[mask].mean()"],
    # detach instead of no_grad; pad_mask read directly
    "joint_loss": [
        "loss_mlm, x_hat, stats = self.generate(masked, **inp)",
        "x_corrupt, is_replaced = corrupt(x, masked, x_hat.detach())",
        "scored = torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask",
        "loss_disc, d_stats, _ = self.discriminate(x, x_corrupt, is_replaced, masked, scored,",
        "                                          **inp)",
        "loss = loss_mlm + self.disc_weight * loss_disc"],
    # the softmax written out instead of scaled_dot_product_attention
    "attention": [
        "B, T, H = h.shape",
        "d = H // self.heads",
        "q, k, v = (t.reshape(B, T, self.heads, d).transpose(1, 2)",
        "           for t in self.qkv(h).split(H, dim=-1))",
        "scores = q @ k.transpose(-2, -1) / d ** 0.5",
        "if attn_mask is not None:",
        "    scores = scores.masked_fill(~attn_mask, float('-inf'))",
        "probs = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)",
        "return self.out((probs @ v).transpose(1, 2).reshape(B, T, H))"],
    # a plain loop, no _foreach
    "adam": [
        "for p, g, m_, v_ in zip(params, grads, m, v):",
        "    m_.mul_(b1).add_(g, alpha=1 - b1)",
        "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
        "    p.sub_(lr * (m_ / (v_.sqrt() + eps) + wd * p))"],
    # powers straight from a regular expression
    "layer_decay": [
        "import re",
        "for name, p in model.named_parameters():",
        "    block = re.match(r'encoder\\.blocks\\.(\\d+)\\.', name)",
        "    if name.startswith('head.'):",
        "        power = 0",
        "    elif block:",
        "        power = L + 1 - int(block.group(1)) if rule == 'official' else L - int(block.group(1))",
        "    else:",
        "        power = L + 2 if rule == 'official' else L + 1",
        "    if power not in groups:",
        "        groups[power] = {'params': [], 'names': [], 'lr': lr * decay ** power}",
        "    groups[power]['params'].append(p)",
        "    groups[power]['names'].append(name)"],
    # indexing instead of a scatter
    "electra15": [
        "in_m = torch.zeros_like(scored, dtype=torch.bool)",
        "used = masked.weights > 0",
        "rows = torch.arange(scored.shape[0])[:, None].expand_as(masked.positions)",
        "in_m[rows[used], masked.positions[used]] = True",
        "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m, pad_mask,",
        "                            segment_ids)"],
    # counted one head at a time
    "flops": [
        "d = hidden // heads",
        "one_head = (3 * (2 * hidden * d + d) + 2 * d * seq + (SOFTMAX + DROPOUT + 1) * seq",
        "            + 2 * d * seq)",
        "attn = (heads * one_head + 2 * hidden * hidden + hidden",
        "        + (DROPOUT + 1 + LAYER_NORM) * hidden)",
        "up = 2 * hidden * ffn + ffn + GELU * ffn",
        "down = 2 * ffn * hidden + hidden + (DROPOUT + 1 + LAYER_NORM) * hidden",
        "return attn + up + down"],
}, {
    "mask": "torch_round",                   # k = torch.round(0.15 n): half to even
    # torch.multinomial on the probabilities
    "sample": [
        "p = torch.softmax(logits.detach().float(), dim=-1)",
        "x_hat = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=generator)",
        "return x_hat.view(p.shape[:-1])"],
    # a loop over rows and slots
    "corrupt": [
        "x_corrupt = x.clone()",
        "for b in range(x.shape[0]):",
        "    for j in range(masked.positions.shape[1]):",
        "        if masked.weights[b, j] > 0:",
        "            x_corrupt[b, masked.positions[b, j]] = x_hat[b, j]",
        "return x_corrupt, x_corrupt != x"],
    # F.cross_entropy's own mean, unused slots set to its ignore_index
    "mlm_loss": [
        "t = targets.masked_fill(weights == 0, -100)",
        "return F.cross_entropy(logits.float().flatten(0, 1), t.flatten(), ignore_index=-100)"],
    # the stable formula by hand: max(z, 0) - z y + log(1 + exp(-|z|)), mask as float weights
    "disc_loss": [
        "z = logits.float()",
        "loss = z.clamp(min=0) - z * is_replaced.float() + torch.log1p(torch.exp(-z.abs()))",
        "w = torch.ones_like(z) if mask is None else mask.float()",
        "return (loss * w).sum() / w.sum()"],
    # one head at a time, masked with the float32 minimum instead of -inf
    "attention": [
        "B, T, H = h.shape",
        "d = H // self.heads",
        "qkv = self.qkv(h)",
        "outs = []",
        "for j in range(self.heads):",
        "    q, k, v = (qkv[..., s * H + j * d:s * H + (j + 1) * d] for s in range(3))",
        "    s = q @ k.transpose(1, 2) * d ** -0.5",
        "    if attn_mask is not None:",
        "        s = s.masked_fill(~attn_mask[:, 0], torch.finfo(s.dtype).min)",
        "    p = F.dropout(torch.softmax(s, dim=-1), self.dropout, training=self.training)",
        "    outs.append(p @ v)",
        "return self.out(torch.cat(outs, dim=-1))"],
    # decay first, as torch's AdamW (θ (1 - η w) is the same θ - η w θ), then addcdiv
    "adam": [
        "for p, g, m_, v_ in zip(params, grads, m, v):",
        "    m_.lerp_(g, 1 - b1)",
        "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
        "    if wd:",
        "        p.mul_(1 - lr * wd)",
        "    p.addcdiv_(m_, v_.sqrt().add(eps), value=-lr)"],
    # the depth from the name's parts
    "layer_decay": [
        "for name, p in model.named_parameters():",
        "    parts = name.split('.')",
        "    if parts[0] == 'head':",
        "        depth = L + 2",
        "    elif parts[:2] == ['encoder', 'blocks']:",
        "        depth = int(parts[2]) + (1 if rule == 'official' else 2)",
        "    else:",
        "        depth = 0 if rule == 'official' else 1",
        "    power = L + 2 - depth",
        "    if power not in groups:",
        "        groups[power] = dict(params=[], names=[], lr=lr * decay ** power)",
        "    groups[power]['params'].append(p)",
        "    groups[power]['names'].append(name)"],
    # one slot at a time, the used rows of each slot marked by indexing
    "electra15": [
        "rows = torch.arange(x.shape[0])",
        "in_m = torch.zeros_like(scored, dtype=torch.bool)",
        "for j in range(masked.positions.shape[1]):",
        "    used = masked.weights[:, j] > 0",
        "    in_m[rows[used], masked.positions[used, j]] = True",
        "return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m,",
        "                            pad_mask=pad_mask, segment_ids=segment_ids)"],
    # d = hidden / heads as a float, a matmul helper
    "flops": [
        "def mm(m, n):",
        "    return 2 * m * n",
        "d = hidden / heads",
        "total = 3 * (mm(hidden, hidden) + hidden)",
        "total += heads * (mm(d, seq) + (SOFTMAX + DROPOUT + 1) * seq + mm(seq, d))",
        "total += mm(hidden, hidden) + hidden + (DROPOUT + 1 + LAYER_NORM) * hidden",
        "total += mm(hidden, ffn) + ffn + GELU * ffn + mm(ffn, hidden) + hidden",
        "return total + (DROPOUT + 1 + LAYER_NORM) * hidden"],
}, {
    # torch.multinomial without replacement over every position, special ones at weight 1e-12
    # (so that a row always has K to draw); unused slots may then hold a special token
    "mask": [
        *MASK_REAL_TOKENS,
        "n = is_real.sum(1)",
        "k = torch.minimum(torch.round(mask_prob * n).clamp(min=1), n).clamp(max=n_slots)",
        "positions = torch.multinomial(is_real.double() + 1e-12, n_slots, generator=generator)",
        "weights = (torch.arange(n_slots)[None] < k[:, None]).float()",
        "targets = x.gather(1, positions)",
        "u = torch.rand(B, n_slots, generator=generator)",
        "shown = torch.where(u < replace_prob, mask_id, targets)",
        "if random_prob:",
        "    rnd = torch.randint(n_random, (B, n_slots), generator=generator)",
        "    is_rnd = (u >= replace_prob) & (u < replace_prob + random_prob)",
        "    shown = torch.where(is_rnd, rnd, shown)",
        "shown = torch.where(weights.bool(), shown, targets)",
        "return Masked(x.scatter(1, positions, shown), positions, targets, weights)"],
    # the exponential race: argmax(z - log E), E ~ Exp(1), is Gumbel-max
    "sample": [
        "z = logits.detach().float()",
        "e = torch.empty_like(z).exponential_(generator=generator)",
        "return torch.argmax(z - torch.log(e), dim=-1)"],
    # from x_masked, which differs from x at used positions only, all of them overwritten
    "corrupt": [
        "x_corrupt = masked.x_masked.clone()",
        "used = masked.weights > 0",
        "rows = torch.arange(x.shape[0])[:, None].expand_as(masked.positions)",
        "x_corrupt[rows[used], masked.positions[used]] = x_hat[used]",
        "return x_corrupt, x_corrupt != x"],
    # logsumexp minus the target's logit, the used slots by a boolean index
    "mlm_loss": [
        "z = logits.float()",
        "nll = z.logsumexp(-1) - z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)",
        "return nll[weights > 0].mean()"],
    # softplus, the mask through torch.where
    "disc_loss": [
        "z = logits.float()",
        "loss = F.softplus(z) - is_replaced.float() * z",
        "mask = torch.ones_like(is_replaced, dtype=torch.bool) if mask is None else mask",
        "return torch.where(mask, loss, torch.zeros_like(loss)).sum() / mask.sum()"],
    # einsum, chunk, an additive -1e9 mask, dropout only when training
    "attention": [
        "import math",
        "B, T, H = h.shape",
        "n, d = self.heads, H // self.heads",
        "q, k, v = (t.view(B, T, n, d) for t in self.qkv(h).chunk(3, dim=-1))",
        "s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(d)",
        "if attn_mask is not None:",
        "    s = s + (~attn_mask).float() * -1e9",
        "p = s.softmax(-1)",
        "if self.training and self.dropout > 0:",
        "    p = F.dropout(p, p=self.dropout)",
        "return self.out(torch.einsum('bhqk,bkhd->bqhd', p, v).reshape(B, T, H))"],
    # the Adam ratio and the decay in float64, cast back to the parameter's dtype
    "adam": [
        "for p, g, m_, v_ in zip(params, grads, m, v):",
        "    m_.mul_(b1).add_(g, alpha=1 - b1)",
        "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
        "    ratio = m_.double() / (v_.double().sqrt() + eps) + wd * p.double()",
        "    p.sub_((lr * ratio).to(p.dtype))"],
}]


def body_of(answer):
    return torch_round_mask() if answer == "torch_round" else answer
