"""teaching/make_assignment.py: student copies fail exactly the blanked parts' tests, a filled-in part
passes its tests - the public ones and the autograder's hidden ones (teaching/hidden_tests.py) -
and plausible wrong answers fail both (issue: teaching, §1)."""
import ast
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import HANG

from teaching import course
from teaching import make_assignment as ma

ROOT = Path(__file__).resolve().parent.parent


HIDDEN = "tests/hidden/test_hidden.py"        # where the autograder puts the hidden tests


def run_tests(folder, *paths):
    """pytest in `folder`: {test file stem: [outcome of each test]} from a JUnit report; the
    hidden tests of a part count under "hidden_<part>"."""
    report = folder / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={report}", *paths], cwd=folder, capture_output=True,
                   text=True, timeout=HANG)
    by_file = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        stem = case.get("classname").split(".")[-1]
        if stem == "test_hidden":                   # test_<part>__<what>
            stem = "hidden_" + case.get("name")[len("test_"):].split("__")[0]
        failed = any(c.tag in ("failure", "error") for c in case)
        by_file.setdefault(stem, []).append("failed" if failed else "passed")
    return by_file


def hidden_ids(parts):
    """The node ids of the hidden tests of `parts`, as the autograder selects them."""
    tree = ast.parse((ROOT / ma.HIDDEN_TESTS).read_text())
    return [f"{HIDDEN}::{f.name}" for f in tree.body if isinstance(f, ast.FunctionDef)
            and f.name.startswith("test_") and f.name[5:].split("__")[0] in parts]


def fill(folder, part, body):
    """Write `body` (lines) into part's region of the student copy."""
    path = folder / course.BY_NAME[part].file
    path.write_text(ma.replace_body(path.read_text(), part, body))


def test_every_part_is_marked_once_in_its_file_and_nothing_else_is():
    marked = {}
    for f in ROOT.glob("*.py"):
        for part in ma.regions(f.read_text()):
            marked.setdefault(part, []).append(f.name)
    assert sorted(marked) == sorted(course.BY_NAME)
    for part, files in marked.items():
        assert files == [course.BY_NAME[part].file], part
        assert ma.reference_body(part), part
        assert (ROOT / "tests" / "parts" / f"test_part_{part}.py").is_file(), part


@pytest.mark.parametrize("blank", [
    # two complementary halves: every part's tests run once with the part blank and once with
    # it written while the parts of the other half are blank
    ["mask", "disc_loss", "joint_loss", "adam", "electra15", "flops"],
    ["sample", "corrupt", "mlm_loss", "attention", "layer_decay"],
])
def test_student_copy_fails_exactly_the_blanked_parts(tmp_path, blank):
    out = tmp_path / "student"
    assert ma.main(["--out", str(out), "--parts", ",".join(blank)]) == 0
    assert "raise NotImplementedError" in (out / "objectives.py").read_text()
    md = (out / "ASSIGNMENTS.md").read_text()
    assert all(f"(`{p.name}`)" in md for p in course.PARTS if p.name in blank)
    assert not any(f"(`{p.name}`)" in md for p in course.PARTS if p.name not in blank)
    results = run_tests(out)
    assert sorted(results) == sorted(f"test_part_{p.name}" for p in course.PARTS)
    for stem, outcomes in results.items():
        part = stem[len("test_part_"):]
        want = "failed" if part in blank else "passed"
        assert outcomes and set(outcomes) == {want}, (stem, outcomes)


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


def grade(tmp_path, answers):
    """A copy with the parts of `answers` blank, each filled with its body, and the hidden tests
    beside the public ones: {part: outcomes of its public tests, "hidden_<part>": of its hidden
    tests}."""
    out = tmp_path / "student"
    ma.make_copy(out, list(answers))
    (out / HIDDEN).parent.mkdir()
    (out / HIDDEN).write_text((ROOT / ma.HIDDEN_TESTS).read_text())
    for part, body in answers.items():
        fill(out, part, body_of(body))
    results = run_tests(out, *(f"tests/parts/test_part_{p}.py" for p in answers),
                        *hidden_ids(answers))
    return {k.replace("test_part_", ""): set(v) for k, v in results.items()}


def test_every_part_has_a_correct_alternative():
    assert sorted(ALTERNATIVES[0]) == sorted(course.BY_NAME)
    for answers in ALTERNATIVES:
        for part, body in answers.items():
            assert body_of(body) != ma.reference_body(part), part


@pytest.mark.parametrize("round_", range(len(ALTERNATIVES)))
def test_filled_parts_pass_with_another_correct_answer(tmp_path, round_):
    """Every answer the contract allows passes the public tests and the hidden ones."""
    answers = ALTERNATIVES[round_]
    assert grade(tmp_path, answers) == {key: {"passed"} for part in answers
                                        for key in (part, f"hidden_{part}")}


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


@pytest.mark.parametrize("round_", range(len(WRONG)))
def test_plausible_wrong_answers_fail_their_part(tmp_path, round_):
    """Each wrong answer fails a public test of its part, and a hidden one: the hidden tests
    catch every mistake on their own."""
    answers = wrong_answers(WRONG[round_])
    results = grade(tmp_path, answers)
    for part in answers:
        assert "failed" in results[part], part
        assert "failed" in results[f"hidden_{part}"], f"hidden tests of {part}"


def test_wrong_answers_of_the_edge_cases_fail_the_hidden_tests(tmp_path):
    """The public tests pass them (else they belong in WRONG); the hidden ones do not."""
    for i, round_ in enumerate(WRONG_HIDDEN_ONLY):
        answers = wrong_answers(round_)
        results = grade(tmp_path / f"round{i}", answers)
        for part in answers:
            assert results[part] == {"passed"}, f"public tests of {part} catch it: to WRONG"
            assert "failed" in results[f"hidden_{part}"], f"hidden tests of {part}"


@pytest.mark.parametrize("args, message", [
    (["--parts", "mask"], "--out is required"),
    (["--out", "{tmp}/x", "--parts", "mask,telepathy"], "unknown part telepathy"),
    (["--out", "{tmp}/full"], "not an empty folder"),
    (["--out", str(ROOT / "student")], "inside the project"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, args, message):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert ma.main(args) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "x").exists() and not (ROOT / "student").exists()


def test_the_committed_assignments_md_is_the_generated_one():
    """ASSIGNMENTS.md in the repository is what make_assignment writes for all parts:
    regenerate it with `python -c "from teaching import make_assignment as m; m.write_md()"`."""
    assert (ROOT / "ASSIGNMENTS.md").read_text() == ma.assignments_md([p.name for p in course.PARTS])


# Restatements of a part's answer outside its region that the copy keeps on purpose: ablations.py
# (needed by every copy: build_model, and Part 10 lives there) wires G, corrupt and D for the
# two-stage and adversarial ablations the way Part 6 wires them for ELECTRA.
KEPT = {("joint_loss", "ablations.py")}
# The answers to the "think about" questions and the method of the reference bodies, as the
# reference states them: none of it may reach a copy with the part blank.
ANSWER_PHRASES = {
    "mask": ["its sample is usually the original"],
    "sample": ["CDF(i-1) <= u < CDF(i)", "log(-torch.log", "searchsorted(cdf"],
    "corrupt": ["flag perfectly good text", 'labelling those tokens "replaced"'],
}


def key_lines(part):
    """The reference body's code lines long enough to be its own (not `return out`)."""
    return [l.strip() for l in ma.reference_body(part)
            if len(l.strip()) >= 25 and not l.strip().startswith("#")]


def test_every_file_of_a_copy_with_every_part_blank_imports(tmp_path):
    """What a copy leaves out (LEFT_OUT) takes along every file that imports it: each module
    the copy ships imports there (selfcheck.py once imported bench.py, which was left out)."""
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    names = sorted(".".join(f.relative_to(out).with_suffix("").parts) for f in out.rglob("*.py")
                   if f.relative_to(out).parts[0] != "tests")
    assert "benchmarks.step_cost" in names and "objectives" in names and len(names) > 40
    script = ("import importlib, sys\n"
              "for n in sys.argv[1:]:\n"
              "    try:\n"
              "        importlib.import_module(n)\n"
              "    except ImportError as e:\n"
              "        print(n, e)\n")
    r = subprocess.run([sys.executable, "-c", script, *names], cwd=out, capture_output=True,
                       text=True, timeout=HANG)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr[-2000:]


def test_the_copy_holds_no_blanked_answer_anywhere(tmp_path):
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    texts = {str(f.relative_to(out)): f.read_text() for f in out.rglob("*")
             if f.suffix in (".py", ".md", ".txt")}
    assert "objectives.py" in texts and "docs/plateau.md" in texts
    assert not (out / ma.INSTRUCTOR_NOTES.relative_to(ma.ROOT)).exists()
    assert not (out / "benchmarks" / "bench.py").exists()          # its Gumbel sampler and corrupt: LEFT_OUT
    for part in course.BY_NAME:
        assert key_lines(part), part
        for line in key_lines(part) + ANSWER_PHRASES.get(part, []):
            hits = [f for f, t in texts.items() if line in t and (part, f) not in KEPT]
            assert not hits, (part, line, hits)
    # the reference does hold them, so the check can fail
    ref = (ma.ROOT / "machinery" / "mlm_output.py").read_text()
    assert "searchsorted(cdf" in ref and "# BEGIN ANSWER sample" in ref
    assert all(p in (ma.ROOT / "objectives.py").read_text() for ps in ANSWER_PHRASES.values()
               for p in ps if "log(-torch" not in p)


def test_the_copy_trains_with_the_students_sample(tmp_path):
    """machinery/mlm_output.py's sampler is replaced by a call to objectives.sample: with Part 2 blank the
    fused path says so; with an answer filled in, it samples through it."""
    out = tmp_path / "student"
    ma.make_copy(out, ["sample"])
    code = (
        "import torch\nfrom machinery import mlm_output\n"
        "z, E = torch.randn(2, 3, 8), torch.randn(11, 8)\n"
        "t, w = torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)\n"
        "try:\n"
        "    mlm_output.mlm_output(z, E, torch.zeros(11), t, w)\n"
        "except NotImplementedError as e:\n"
        "    print('blank:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True)
    assert "blank: Part 2 (sample" in r.stdout, r.stderr
    fill(out, "sample", ["return logits.detach().argmax(-1) * 0 + 7"])     # a marker answer
    r = subprocess.run([sys.executable, "-c", code.replace(
        "    mlm_output.mlm_output(z, E, torch.zeros(11), t, w)",
        "    print('x_hat', mlm_output.mlm_output(z, E, torch.zeros(11), t, w)[1].tolist())")],
        cwd=out, capture_output=True, text=True)
    assert "x_hat [[7, 7, 7], [7, 7, 7]]" in r.stdout, r.stderr


# Words that name a way of computing a part (the reference's or another's): a blank part's
# message says what to compute, not how, so none of them may appear in it.
METHOD_WORDS = {
    "mask": ["score", "topk", "top k", "top-k", "randperm", "sort", "multinomial"],
    "sample": ["cdf", "gumbel", "searchsorted", "multinomial", "cumsum", "argmax", "invert"],
    "corrupt": ["scatter", "index", "column", "torch.where", "clone"],
    "mlm_loss": ["cross_entropy", "log_softmax", "gather"],
    "disc_loss": ["binary_cross_entropy", "with_logits", "logsigmoid"],
    "joint_loss": ["no_grad", "detach", "real_tokens"],
    "attention": ["scaled_dot_product", "permute", "view", "transpose", "reshape", "split"],
    "adam": ["_foreach", "lerp", "addcmul", "loop"],
    "layer_decay": ["startswith", "split", "setdefault", "regular expression", "re.match"],
    "electra15": ["scatter", "index", "zeros", "&"],
    "flops": ["per head, then", "loop"],
}


def test_a_blank_part_says_what_to_compute_not_how():
    assert sorted(METHOD_WORDS) == sorted(course.BY_NAME)
    for p in course.PARTS:
        message = ma.stub(p.name)[0]
        assert message.startswith(f'raise NotImplementedError("Part {course.PARTS.index(p) + 1} '
                                  f'({p.name}, paper {p.section}): ')
        named = [w for w in METHOD_WORDS[p.name] if w in message.lower()]
        assert not named, (p.name, named, message)
    # the check can fail: the words are those of the reference bodies
    assert "topk" in "\n".join(ma.reference_body("mask"))
    assert "searchsorted" in "\n".join(ma.reference_body("sample"))


def test_every_relative_link_in_a_copy_resolves(tmp_path):
    """A copy leaves files out (docs/instructor-notes.md, and benchmarks/bench.py, parity.py and
    hf_electra.py when Part 2 or 3 is blank): its README and documents link only what it has,
    and its README's note names every project file the README mentions that the copy lacks."""
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    assert not (out / "benchmarks" / "bench.py").exists()
    links = 0
    for md in [out / "README.md", out / "ASSIGNMENTS.md", *sorted((out / "docs").glob("*.md"))]:
        for m in ma.LINK.finditer(md.read_text()):
            target = m.group(2)
            if target.startswith(("http:", "https:", "mailto:", "#")):
                continue
            links += 1
            assert (md.parent / target.split("#")[0]).exists(), (md.name, target)
    assert links > 40                          # the README and docs link a lot: all checked
    readme = (out / "README.md").read_text()
    note = readme.split("\n\n")[1]
    assert note.startswith("> **A student copy**") and "ASSIGNMENTS.md" in note
    for path in set(re.findall(r"`([\w./-]+\.(?:py|sh|md))`", readme)):
        if (ROOT / path).is_file() and not (out / path).exists() and \
                not path.startswith("tests/"):
            assert f"`{path}`" in note, path
    # the reference README does link what copies lack, so the check can fail
    assert "](docs/instructor-notes.md)" in (ROOT / "README.md").read_text()
    assert "](docs/instructor-notes.md)" not in readme
    # the license goes with the code: a copy is the project, and MIT asks for its notice
    assert "[LICENSE](LICENSE)" in readme
    assert (out / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
