"""One real step of §2 on one short sentence, as a table: x, m, x_masked, x̂, x_corrupt,
is_replaced and D's verdict (the Annotated ELECTRA shows it on the objectives.py page).

    python teaching/one_step.py --ckpt out/ckpt.pt                      # -> docs/one_step.json
    python teaching/one_step.py --ckpt out/ckpt.pt --text "..." --seed 3 --out one_step.json

The mask step is objectives.mask_tokens with the checkpoint's mask rate (15 %: 85 % of the
chosen positions shown as [MASK], 15 % kept), sample and corrupt are G's logits at m,
objectives.sample and objectives.corrupt - the functions training calls, on a batch of one
sentence, with a seeded generator so that the table is reproducible. G and D are in eval mode (no dropout). The JSON
holds the tokens of every row and where they came from (checkpoint step, command, date).
"""
import datetime
import json
import platform
import sys
from pathlib import Path

if not __package__:   # run as a path (python teaching/one_step.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from ablations import build_model
from batches import draw_slots
from config import Config
from machinery import cli
from machinery.atomic import atomic_write
from machinery.checkpoint import CheckpointError, load_checkpoint
from machinery.tokenizer import Tokenizer
from objectives import corrupt, mask_tokens, sample

ROOT = Path(__file__).resolve().parents[1]
# A sentence of the demo corpus's validation text (NumPy's documentation), 11 tokens with its
# BPE: it fits the 16-token sequences of the laptop recipe, which the quick start's checkpoint was
# trained on; docs/annotated.md says how it was chosen.
TEXT = "Return the product of array elements over a given axis."


class StepError(Exception):
    """Bad input: one `error:` line, exit code 2."""


def shown(tok, i):
    """A token id as the table shows it: special tokens by name, others as their text."""
    names = {tok.pad_id: "[PAD]", tok.cls_id: "[CLS]", tok.sep_id: "[SEP]", tok.mask_id: "[MASK]"}
    if i in names:
        return names[i]
    text = tok.decode([i])
    return text.strip() if text.strip().isprintable() and text.strip() else repr(text)


def one_step(model, tok, cfg, text, seed=0):
    """Every tensor of the mask, sample and corrupt steps for one sentence, and P(replaced)
    from D: a dict of lists (one entry per position t) plus m, the masked positions."""
    ids = tok.encode(text)
    if len(ids) > cfg.seq_len - 2:          # positions past the trained length are untrained
        raise StepError(f"--text has {len(ids)} tokens; this checkpoint was trained on "
                        f"{cfg.seq_len}-token sequences, so give at most {cfg.seq_len - 2} "
                        "([CLS] and [SEP] take two)")
    x = torch.tensor([[tok.cls_id] + ids + [tok.sep_id]])
    g = torch.Generator().manual_seed(seed)
    n_slots = draw_slots(x, tok.special_ids, cfg.seq_len, cfg.mask_prob)  # as training draws
    with torch.no_grad():
        masked = mask_tokens(x, tok.special_ids, tok.mask_id, n_slots, cfg.mask_prob,
                             generator=g)                                     # mask
        logits = model.generator(masked.x_masked, masked.positions)          # p_G at m
        x_hat = sample(logits, generator=g)                                   # x̂_i ~ p_G
        x_corrupt, is_replaced = corrupt(x, masked, x_hat)                    # corrupt
        p_replaced = torch.sigmoid(model.discriminator(x_corrupt).float())   # 1 - D(x, t)
    used = masked.weights[0] > 0
    m = sorted(int(t) for t in masked.positions[0][used])
    hat = {int(t): int(v) for t, v in zip(masked.positions[0][used], x_hat[0][used])}
    T = x.shape[1]
    return dict(m=m, rows=dict(
        x=[shown(tok, int(i)) for i in x[0]],
        m=["✓" if t in m else "" for t in range(T)],
        x_masked=[shown(tok, int(i)) for i in masked.x_masked[0]],
        x_hat=[shown(tok, hat[t]) if t in hat else "" for t in range(T)],
        x_corrupt=[shown(tok, int(i)) for i in x_corrupt[0]],
        is_replaced=[int(b) for b in is_replaced[0]],
        p_replaced=[f"{float(p):.2f}" for p in p_replaced[0]]))


def load(path):
    """(model in eval mode, tokenizer, config) of an ELECTRA checkpoint, or StepError."""
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as e:
        raise StepError(str(e)) from None
    cfg, tok = Config.from_dict(ckpt["config"]), Tokenizer.from_text(ckpt["tokenizer"])
    if cfg.model != "electra" or cfg.objective != "electra" or cfg.generator != "mlm":
        raise StepError(f"{path}: not an ELECTRA checkpoint with a masked-LM generator "
                        f"(model {cfg.model}, objective {cfg.objective}, generator {cfg.generator})")
    model = build_model(cfg)
    model.load_state_dict(ckpt["model"])
    return model.eval(), tok, cfg, ckpt.get("step")


def main(argv=None):
    p = cli.Parser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True, type=cli.nonempty, help="an ELECTRA checkpoint")
    p.add_argument("--text", type=cli.nonempty, default=TEXT, help="one short sentence")
    p.add_argument("--seed", type=cli.seed, default=0, help="for the mask and the sample")
    p.add_argument("--out", type=cli.out_file, default=str(ROOT / "docs" / "one_step.json"),
                   help="the JSON file to write (default docs/one_step.json)")
    args = p.parse_args(argv)
    try:
        model, tok, cfg, step = load(args.ckpt)
        torch.manual_seed(args.seed)
        data = one_step(model, tok, cfg, args.text, args.seed)
    except StepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NotImplementedError as e:    # a student copy with a part still blank: one line
        print(cli.blank_part_or_raise(e), file=sys.stderr)
        return 1
    data.update(
        command="python teaching/one_step.py " + " ".join(
            f"--{k} {json.dumps(v) if k == 'text' else v}" for k, v in
            [("ckpt", Path(args.ckpt).name), ("text", args.text), ("seed", args.seed)]),
        checkpoint=dict(size=f"D {cfg.disc.layers} x {cfg.disc.hidden}, vocabulary "
                             f"{cfg.vocab_size}", step=step),
        date=datetime.date.today().isoformat(), torch=torch.__version__,
        machine=platform.machine(),
        note=f"Checkpoint after {step} steps; seed {args.seed}; yellow: the masked positions "
             "m; red: the tokens that differ from x (is_replaced is 1).")
    rows = ",\n".join(f'  "{k}": {json.dumps(v, ensure_ascii=False)}' for k, v in data.pop("rows").items())
    text = (json.dumps(data, ensure_ascii=False, indent=1)[:-2]      # one line per row
            + f',\n "rows": {{\n{rows}\n }}\n}}\n')
    atomic_write(args.out, lambda path: Path(path).write_text(text, encoding="utf-8"))
    print(f"wrote {args.out}: {len(json.loads(text)['rows']['x'])} tokens, m = {data['m']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
