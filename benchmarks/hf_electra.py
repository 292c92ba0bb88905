"""Hugging Face's ELECTRA, wired the way its pre-training examples wire it, behind our model's
interface (machinery; paper §2 in Hugging Face's code): the contender benchmarks/bench.py times against
ours and the model benchmarks/parity.py trains beside ours. Needs the optional `transformers`.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")           # HF builds from a config; never download
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


class HFElectra(nn.Module):
    """Hugging Face's ELECTRA pair, wired as its pre-training examples do: ElectraForMaskedLM as G,
    ElectraForPreTraining as D, D given G's embeddings module (G's output layer is tied to the
    word embeddings by HF's default), loss = L_MLM + λ L_Disc. Same forward signature as ours,
    so train.training_step trains it unchanged."""

    def __init__(self, cfg, attn="sdpa"):
        super().__init__()
        from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

        def config(enc, attn):
            return ElectraConfig(
                vocab_size=cfg.vocab_size, embedding_size=cfg.emb_size, hidden_size=enc.hidden,
                num_hidden_layers=enc.layers, num_attention_heads=enc.heads,
                intermediate_size=enc.ffn, max_position_embeddings=cfg.max_len,
                hidden_dropout_prob=enc.dropout, attention_probs_dropout_prob=enc.dropout,
                pad_token_id=cfg.vocab_size - 4, attn_implementation=attn)
        try:                                # older transformers have no SDPA path for Electra
            self.generator = ElectraForMaskedLM(config(cfg.gen, attn))
        except (ValueError, ImportError):
            attn = "eager"
            self.generator = ElectraForMaskedLM(config(cfg.gen, attn))
        self.discriminator = ElectraForPreTraining(config(cfg.disc, attn))
        self.discriminator.electra.embeddings = self.generator.electra.embeddings   # shared
        self.attn = self.generator.config._attn_implementation or attn
        self.disc_weight = cfg.disc_weight

    def forward(self, x, masked, pad_mask=None, segment_ids=None):
        x_masked, positions, targets, weights = masked
        # HF's MLM loss: labels -100 (ignored) everywhere but the used mask slots.
        # (A sum over slots finds the used positions whatever the unused slots hold.)
        used = torch.zeros(x.shape, device=x.device).scatter_add(1, positions, weights.float()) > 0
        labels = torch.where(used, x, -100)
        inp = dict(attention_mask=None if pad_mask is None else pad_mask.long(),
                   token_type_ids=segment_ids)
        g = self.generator(input_ids=x_masked, labels=labels, **inp)
        with torch.no_grad():                   # Gumbel-max sample at the mask slots; no grad
            V = g.logits.shape[-1]
            logits = torch.gather(g.logits, 1, positions[..., None].expand(-1, -1, V))
            u = torch.rand(logits.shape, device=logits.device).clamp(1e-9, 1 - 1e-7)
            x_hat = (logits.float() - torch.log(-torch.log(u))).argmax(-1)
            # unused slots write into a spare column T, dropped: they cannot undo a used one
            T = x.shape[1]
            x_corrupt = F.pad(x, (0, 1)).scatter(1, torch.where(weights > 0, positions, T),
                                                 x_hat)[:, :T]
            is_replaced = (x_corrupt != x).long()    # a sample equal to the original is "real"
        # HF averages L_Disc over attention_mask's real tokens, as ours over pad_mask's
        d = self.discriminator(input_ids=x_corrupt, labels=is_replaced, **inp)
        loss = g.loss + self.disc_weight * d.loss
        with torch.no_grad():                   # D's recall / precision on replaced tokens
            real = torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask
            flagged, rep = (d.logits > 0) & real, is_replaced.bool()
            caught = (flagged & rep).float().sum()
        return loss, dict(mlm_loss=g.loss, disc_loss=d.loss, x_corrupt=x_corrupt,
                          is_replaced=is_replaced, replaced_correct=(caught, rep.float().sum()),
                          replaced_flagged=(caught, flagged.float().sum()))

