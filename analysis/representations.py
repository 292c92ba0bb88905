"""How ELECTRA's discriminator represents text, against BERT's masked LM of equal compute: the
question a blog review asks and the paper leaves open (Mark Neumann, "Paper Review:
Electra", https://markneumann.xyz/blog/electra: "how do they differ from representations learnt by BERT, for example?"). §3.3
compares the two only through GLUE scores.

Two measurements on the same held-out tokens (real text, no [MASK], no corruption: what each
network reads when it is fine-tuned):

  linear CKA   Kornblith et al. (2019), "Similarity of Neural Network Representations
               Revisited": for representations X (n x d1) and Y (n x d2) of the same n tokens,
               centred per dimension,
                   CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)
               1 for the same representation up to a rotation and an overall scale (any
               orthogonal Q: (XQ)^T XQ has the norms of X^T X), near 0 for independent ones.
               Every layer of D against every layer of BERT: a heat map.
  probes       a linear classifier (multinomial logistic regression) on each layer's vectors,
               trained on 70 % of the sequences and scored on the other 30 %, for what the
               tokenizer tells without any tagger: the token's identity (among the 100 most
               frequent tokens), its position in the sequence, and whether it continues a word
               (a piece glued to the one before it). Above the majority class = the property is
               linearly readable there.

"Layers" are the states a block passes on: the projected embeddings, then per block the state
after attention (+ residual, LayerNorm) and after the feed-forward network; Block.forward
computes the same (a test checks that the last one is the network's h(x)).
The command is `inspect_discriminator.py compare --ckpt ELECTRA --bert BERT --data DIR`.
"""
import numpy as np
import torch
import torch.nn.functional as F

from encoder import attention_mask
from analysis.analyses import InspectError, batches, pieces, save_png
import matplotlib
matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402


# ----------------------------------------------------------------------------- linear CKA

def linear_cka(x, y):
    """Linear CKA of two representations of the same n examples, (n, d1) and (n, d2): in
    [0, 1], computed in float64 (the Frobenius norms square the entries)."""
    x, y = x.double(), y.double()
    x, y = x - x.mean(0), y - y.mean(0)
    cross = (y.T @ x).square().sum()
    return float(cross / ((x.T @ x).norm() * (y.T @ y).norm()).clamp(min=1e-30))


# ----------------------------------------------------------------------------- layer by layer

def layer_states(net, x, pad_mask=None):
    """[(name, (B, T, hidden))] of an encoder network (D, or BERT's MLM): the projected
    embeddings, then for each block its state after attention and after the FFN - Block.forward
    (encoder.py) step by step, in eval mode (dropout off)."""
    h, m = net.encoder.proj(net.embeddings(x)), attention_mask(pad_mask)
    states = [("embeddings", h)]
    for i, block in enumerate(net.encoder.blocks, 1):
        a = block.norm1(h + block.attn(h, m))
        h = block.norm2(a + block.ffn_out(F.gelu(block.ffn_in(a))))
        states += [(f"block {i} attention", a), (f"block {i} FFN", h)]
    return states


def continues_word(toks):
    """For each piece of a sequence: True where it continues the word of the piece before (no
    leading space, begins with a letter or digit, glued to one that ends with one), the rule
    the sentence view uses to find words."""
    out = [False] * len(toks)
    for i in range(1, len(toks)):
        t, prev = toks[i], toks[i - 1]
        out[i] = t[:1].isalnum() and prev[-1:].isalnum() and not prev.startswith("[")
    return out


def collect(nets, tok, seqs):
    """Every network's states at every real, non-special token of the held-out sequences, and
    the tokens' properties: (states {net: [(name, (n, hidden))]}, props, sequence index)."""
    specials = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id])
    per = {k: [] for k in nets}
    ids, pos, cont, seq_of = [], [], [], []
    for idx, x, pad_mask, _ in batches(seqs, tok.pad_id, bs=64):
        keep = pad_mask & ~torch.isin(x, specials)
        for k, net in nets.items():
            per[k].append([(n, s[keep].float()) for n, s in layer_states(net, x, pad_mask)])
        for r, i in enumerate(idx):
            toks = pieces(tok, x[r, :len(seqs[i])])
            c = continues_word(toks)
            for t in range(len(seqs[i])):
                if keep[r, t]:
                    ids.append(int(x[r, t]))
                    pos.append(t)
                    cont.append(int(c[t]))
                    seq_of.append(i)
    states = {k: [(v[0][j][0], torch.cat([b[j][1] for b in v])) for j in range(len(v[0]))]
              for k, v in per.items()}
    return states, dict(identity=np.array(ids), position=np.array(pos),
                        continuation=np.array(cont)), np.array(seq_of)


# ----------------------------------------------------------------------------- linear probes

def probe_accuracy(feats, labels, train, steps=60, l2=1e-3):
    """Test accuracy of a multinomial logistic regression (L-BFGS, features standardised on the
    training rows) that reads `labels` from `feats`; and the majority class's accuracy."""
    with torch.inference_mode(False), torch.enable_grad():    # the inspector runs in
        return _fit(feats.clone().double(), torch.as_tensor(labels), train, steps, l2)  # inference


def _fit(feats, labels, train, steps, l2):
    classes, y = torch.unique(labels, return_inverse=True)
    test = ~train
    if len(classes) < 2 or not train.any() or not test.any():
        return float("nan"), float("nan")
    mu, sd = feats[train].mean(0), feats[train].std(0).clamp(min=1e-6)
    z = (feats - mu) / sd
    w = torch.zeros(z.shape[1], len(classes), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(len(classes), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(z[train] @ w + b, y[train]) + l2 * w.square().sum()
        loss.backward()
        return loss
    opt.step(closure)
    with torch.no_grad():
        acc = float(((z[test] @ w + b).argmax(1) == y[test]).double().mean())
    majority = float((y[test] == torch.bincount(y[train]).argmax()).double().mean())
    return acc, majority


def probes(states, props, seq_of, top=100, share=0.7):
    """{property: {net: [(layer, accuracy)]}, and each property's majority baseline}: each
    probe trained on the first `share` of the sequences, tested on the rest."""
    split = np.quantile(np.unique(seq_of), share) if len(seq_of) else 0
    train_all = torch.as_tensor(seq_of < split)
    frequent = np.argsort(-np.bincount(props["identity"]))[:top]
    among = np.isin(props["identity"], frequent)
    res, base = {}, {}
    for prop, labels in props.items():
        rows = torch.as_tensor(among) if prop == "identity" else torch.ones(len(labels), dtype=bool)
        res[prop] = {}
        for net, layers in states.items():
            res[prop][net] = []
            for name, s in layers:
                acc, base[prop] = probe_accuracy(s[rows], labels[rows.numpy()], train_all[rows])
                res[prop][net].append((name, acc))
    return res, base


# ----------------------------------------------------------------------------- the comparison

def compare(electra, bert, tok, seqs, out):
    """CKA of every layer of ELECTRA's D with every layer of BERT's encoder, the probes of
    both, printed as tables, drawn to cka.png and probes.png; returns the numbers."""
    nets = dict(ELECTRA=electra.discriminator, BERT=bert.mlm)
    states, props, seq_of = collect(nets, tok, seqs)
    n = len(props["identity"])
    if n < 20:
        raise InspectError(f"compare: only {n} held-out tokens; give more text (--n)")
    ln = lambda k: [name for name, _ in states[k]]          # noqa: E731
    cka = np.array([[linear_cka(a, b) for _, b in states["BERT"]] for _, a in states["ELECTRA"]])
    w = max(map(len, ln("ELECTRA") + ln("BERT")))
    print(f"linear CKA on {n:,} held-out tokens ({len(seqs)} sequences): rows ELECTRA's D, "
          "columns BERT")
    print(" " * (w + 2) + "".join(f"{'B' + str(j):>7}" for j in range(len(ln("BERT")))))
    for i, name in enumerate(ln("ELECTRA")):
        print(f"  {name:<{w}}" + "".join(f"{v:7.3f}" for v in cka[i]))
    print("  " + "; ".join(f"B{j} = {name}" for j, name in enumerate(ln("BERT"))))
    res, base = probes(states, props, seq_of)
    what = dict(identity="token identity (100 most frequent)", position="position in sequence",
                continuation="continues a word")
    print("linear probes, held-out accuracy (ELECTRA / BERT; majority class in brackets)")
    for prop, by_net in res.items():
        print(f"  {what[prop]} [{100 * base[prop]:.1f} %]")
        for (name, a), (_, b) in zip(by_net["ELECTRA"], by_net["BERT"]):
            print(f"    {name:<{w}} {100 * a:5.1f} % / {100 * b:5.1f} %")
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(ln("BERT")), 1 + 0.6 * len(ln("ELECTRA"))))
    im = ax.imshow(cka, vmin=0, vmax=1, cmap="viridis")
    for i in range(cka.shape[0]):
        for j in range(cka.shape[1]):
            ax.text(j, i, f"{cka[i, j]:.2f}", ha="center", va="center",
                    color="w" if cka[i, j] < 0.6 else "k", fontsize=8)
    ax.set_xticks(range(len(ln("BERT"))), ln("BERT"), rotation=45, ha="right")
    ax.set_yticks(range(len(ln("ELECTRA"))), ln("ELECTRA"))
    ax.set(xlabel="BERT (masked LM)", ylabel="ELECTRA's D", title="linear CKA")
    fig.colorbar(im, ax=ax)
    save_png(fig, out / "cka.png")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (prop, by_net) in zip(axes, res.items()):
        for net, style in (("ELECTRA", "o-"), ("BERT", "s--")):
            ax.plot([100 * a for _, a in by_net[net]], style, label=net)
        ax.axhline(100 * base[prop], c="grey", ls=":", label="majority class")
        ax.set_xticks(range(len(ln("ELECTRA"))), ln("ELECTRA"), rotation=45, ha="right")
        ax.set(title=what[prop], ylabel="held-out accuracy (%)", ylim=(0, 100))
    axes[0].legend()
    save_png(fig, out / "probes.png")
    return dict(n_tokens=n, n_sequences=len(seqs), electra_layers=ln("ELECTRA"),
                bert_layers=ln("BERT"), cka=cka.tolist(),
                probes={p: {k: [a for _, a in v] for k, v in d.items()} for p, d in res.items()},
                majority=base)
