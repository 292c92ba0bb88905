"""The browser page of analysis/serve.py: the HTML of the form, D's sentence view and one step
of §2 (Figure 2), rendered on the server - plain HTML and one style sheet, no script, nothing
from the network. Every piece of a request shown on the page goes through `esc`.

The sentence view colours each token by D's P(replaced), white at 0 to red at 1 (`colour`);
the step is the rows of the Annotated ELECTRA's step table: x, m, x_masked, G's top-k, x̂,
x_corrupt, is_replaced, P(replaced) and D's verdict."""
import html

from analysis.analyses import shown

MAX_TOPK = 20
MODES = ("mine", "draw")      # positions: chosen by hand, or drawn as training draws them


def colour(p):
    """The background for P(replaced) = p: white at 0 to red, rgb(230, 25, 25), at 1."""
    p = min(1.0, max(0.0, float(p)))
    return (255 - round(25 * p), 255 - round(230 * p), 255 - round(230 * p))


def rgb(p):
    r, g, b = colour(p)
    return f"background:rgb({r},{g},{b});color:{'#fff' if p > 0.6 else '#000'}"


CSS = """
body{margin:0;background:#f7f7f5;color:#1d1d1d;font:16px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,sans-serif}
main{max-width:75rem;margin:0 auto;padding:.8rem 1rem 2rem}
h1{font-size:1.35rem;margin:.3rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .3rem}
p{margin:.35rem 0}.about{color:#444;font-size:.92rem}
textarea{box-sizing:border-box;width:100%;min-height:3em;font:inherit;padding:.4rem}
.controls{display:flex;flex-wrap:wrap;gap:.4rem 1.1rem;align-items:center;margin:.5rem 0}
.controls input[type=text]{width:9rem}.controls input[type=number]{width:5.5rem}
input,button{font:inherit}fieldset{border:0;padding:0;margin:0;display:flex;flex-wrap:wrap;
gap:.2rem .9rem}
.go{padding:.25rem 1.1rem}
.msg{border-left:5px solid #c62828;background:#fdecea;padding:.45rem .7rem;margin:.6rem 0}
.note{border-left:5px solid #e6a100;background:#fff6dc;padding:.45rem .7rem;margin:.6rem 0}
.tokens{display:flex;flex-wrap:wrap;gap:5px;margin:.5rem 0}
.tok{display:inline-flex;flex-direction:column;align-items:center;min-width:2.3rem;
padding:.15rem .45rem;border:1px solid #999;border-radius:5px;font:inherit;line-height:1.25}
button.tok{cursor:pointer}.tok small{font-size:.72rem;font-variant-numeric:tabular-nums}
.tok.m{outline:3px solid #1f5fbf;outline-offset:1px}.tok.special{border-style:dashed}
.tok.r{border:3px solid #111;padding:0 .35rem}
.scale{display:flex;align-items:center;gap:.5rem;font-size:.85rem;color:#444}
.scale span.bar{display:inline-block;width:12rem;height:.8rem;border:1px solid #999;
background:linear-gradient(to right,rgb(255,255,255),rgb(230,25,25))}
.wrap{overflow-x:auto;border:1px solid #ddd;background:#fff;width:fit-content;max-width:100%}
table{border-collapse:collapse;font-size:.88rem}
th,td{border:1px solid #e0e0e0;padding:.2rem .45rem;text-align:center;white-space:nowrap}
th{position:sticky;left:0;background:#efefec;text-align:left;font-weight:600}
td.m{background:#fff3b0}td.rep{background:#f4a6a6}td.right{background:#c9e7c9}
td.wrong{background:#dcc6f0}td.top{text-align:left;font-size:.8rem;line-height:1.3}
.small{font-size:.85rem;color:#444}code{font-size:.92em}
.side{display:none}@media (max-width:56rem){.side{display:inline}}
"""


def esc(s):
    return html.escape(str(s), quote=True)


def page(inspector, fields, mode="mine", toks=None, p=None, cols=None, notes=(), seed=0, k=5,
         error=None):
    text = fields.get("text", "")
    if not isinstance(text, str):
        text = ""
    mode = mode if mode in MODES else "mine"
    checked = lambda m: " checked" if m == mode else ""                      # noqa: E731
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           "<meta name=viewport content='width=device-width,initial-scale=1'>",
           "<link rel=icon href='data:,'><title>Look inside D</title>",
           f"<style>{CSS}</style></head><body><main>",
           "<h1>Look inside D: replaced token detection on your sentence</h1>",
           f"<p class=about><strong>{esc(inspector.path.name)}</strong> - {esc(inspector.about)} ",
           annotated_link(inspector), "</p>",
           "<form id=f method=get action='/'>",
           "<label for=text class=small>Your text (D reads the first "
           f"{inspector.cfg.seq_len - 2} tokens)</label>",
           f"<textarea id=text name=text rows=2 placeholder='e.g. {esc(inspector.example)}'>"
           f"{esc(text)}</textarea>",
           "<div class=controls><fieldset><span>Mask:</span>",
           f"<label><input type=radio name=mode value=mine{checked('mine')}> these tokens "
           f"<input type=text name=mask value='{esc(fields.get('mask', ''))}' "
           "placeholder='2,5 or a word' aria-label='tokens to mask: numbers or words'></label>",
           f"<label><input type=radio name=mode value=draw{checked('draw')}> 15 % drawn as in "
           "training</label></fieldset>",
           f"<label>seed <input type=number name=seed min=0 value='{esc(seed)}'></label>",
           f"<label>top-k <input type=number name=k min=1 max={MAX_TOPK} value='{esc(k)}'>"
           "</label><button class=go type=submit>Show</button></div>"]
    if error:
        out.append(f"<p class=msg role=alert>{esc(error)}</p>")
    out += [f"<p class=note>{esc(n)}</p>" for n in notes]
    if toks is not None:
        out += sentence_html(toks, p, cols)
    if cols is not None:
        out += step_html(cols, mode, seed)
    if toks is None and not error:
        out.append("<p class=small>Type a sentence and press Show: D colours each token by its "
                   "P(replaced). Then click tokens to mask them, and G fills them in. D knows the "
                   "kind of text it was trained on best; "
                   + ("one of its validation sentences" if inspector.example_is_its_own
                      else "the paper's example") +
                   f": “{esc(inspector.example)}”</p>")
    out.append("</form></main></body></html>")
    return "".join(out)


def annotated_link(inspector):
    if "objectives.html" in inspector.annotated:
        return ("How one step works, line by line: <a href='/annotated/objectives.html'>the "
                "Annotated ELECTRA, objectives.py</a>.")
    return ("How one step works, line by line: the Annotated ELECTRA's objectives.py page "
            "(build it with <code>python teaching/annotate.py</code>, then restart this page to "
            "link it).")


def sentence_html(toks, p, cols):
    masked = {c["t"] for c in cols if c["m"]} if cols else set()
    out = ["<h2>D on your text as typed</h2>",
           "<p class=small>Each token coloured by D's P(replaced) = 1 - D(x, t), its value below "
           "it. Click a token to mask it (click again to unmask); a blue frame marks the masked "
           "ones.</p><div class=tokens>"]
    for t, (w, q) in enumerate(zip(toks, p)):
        label = esc(shown(w))
        body = f"<span>{label}</span><small>{q:.3f}</small>"
        title = f"{label}: P(replaced) {q:.3f}"
        cls = "tok m" if t in masked else "tok"
        if t == 0 or t == len(toks) - 1:
            out.append(f"<span class='tok special' data-t={t} data-p='{q:.3f}' "
                       f"style='{rgb(q)}' title='{title}'>{body}</span>")
        else:
            out.append(f"<button type=submit class='{cls}' name=toggle value={t - 1} "
                       f"data-t={t} data-p='{q:.3f}' style='{rgb(q)}' "
                       f"title='{title} (token {t - 1}: click to mask)'>{body}</button>")
    out.append("</div><p class=scale>P(replaced) <span>0</span><span class=bar></span>"
               "<span>1</span></p>")
    return out


def step_html(cols, mode, seed):
    m = [c for c in cols if c["m"]]
    rep = [c for c in cols if c["is_replaced"]]
    caught = sum(c["p"] > 0.5 for c in rep)
    false = sum(c["p"] > 0.5 for c in cols if not c["is_replaced"])
    how = (f"m as training draws it (objectives.mask_tokens, seed {seed}): "
           f"{len(m)} of the {len(cols) - 2} tokens, about 15 %; 85 % of them are shown to G as "
           "[MASK], the others keep their token and G predicts them too."
           if mode == "draw" else
           (f"The {len(m)} tokens you chose, each" if len(m) > 1 else "The token you chose,") +
           " shown to G as [MASK] (as <code>inspect_discriminator.py figure2 --mask</code>).")
    g_said = (f"G replaced {len(rep)} of the {len(m)} masked tokens." if len(m) > 1 else
              "G replaced the masked token." if rep else
              "G sampled the original token back, so it counts as real.")
    out = ["<h2>One step of ELECTRA on it (§2, Figure 2)</h2>",
           f"<p class=small>{how} G samples x̂ ~ p_G(x_t | x_masked) at each masked position "
           f"(seed {seed}); x_corrupt takes the samples; a sample equal to the original is real "
           "(is_replaced compares x_corrupt with x); D reads x_corrupt and says P(replaced).</p>",
           f"<p>{g_said} D flags {caught} of the {len(rep)} replaced and {false} of the "
           f"{len(cols) - len(rep)} original tokens ([CLS] and [SEP] included) at P(replaced) "
           "&gt; 0.5.</p>",
           "<p class=small>D on x_corrupt, coloured by P(replaced); a black frame marks G's "
           "replacements (is_replaced = 1):</p><div class=tokens>"]
    for c in cols:
        cls = " special" if c["t"] in (0, len(cols) - 1) else " r" if c["is_replaced"] else ""
        w = esc(shown(c["x_corrupt"]))
        out.append(f"<span class='tok{cls}' data-pc='{c['p']:.3f}' style='{rgb(c['p'])}' "
                   f"title='{w}: P(replaced) {c['p']:.3f}'><span>{w}</span>"
                   f"<small>{c['p']:.3f}</small></span>")
    names = [str(c["t"] - 1) for c in m]
    where = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)
    out.append(f"</div><p class=small>The step's rows, token by token; masked: token"
               f"{'s' if len(names) > 1 else ''} {where}, in yellow<span class="
               f"{'side' if len(cols) <= 16 else 'wide'}> (the table scrolls sideways)</span>:"
               "</p>"
               "<div class=wrap><table>")
    rows = [("t", "token", lambda c: "" if c["t"] in (0, len(cols) - 1) else c["t"] - 1, None),
            ("x", "x", lambda c: shown(c["x"]), None),
            ("m", "m (masked)", lambda c: "✓" if c["m"] else "", lambda c: "m" if c["m"] else ""),
            ("x_masked", "x_masked", lambda c: shown(c["x_masked"]),
             lambda c: "m" if c["m"] else ""),
            ("top", "top-k of p_G", None, lambda c: "top"),
            ("x_hat", "x̂ ~ p_G", lambda c: "" if c["x_hat"] is None else shown(c["x_hat"]),
             None),
            ("x_corrupt", "x_corrupt", lambda c: shown(c["x_corrupt"]),
             lambda c: "rep" if c["is_replaced"] else ""),
            ("is_replaced", "is_replaced", lambda c: int(c["is_replaced"]),
             lambda c: "rep" if c["is_replaced"] else ""),
            ("p", "P(replaced)", lambda c: f"{c['p']:.3f}", None),
            ("d_says", "D says", lambda c: "replaced" if c["p"] > 0.5 else "original",
             lambda c: "right" if (c["p"] > 0.5) == c["is_replaced"] else "wrong")]
    for key, name, value, cls in rows:
        out.append(f"<tr><th scope=row>{esc(name)}</th>")
        for c in cols:
            klass = f" class={cls(c)}" if cls and cls(c) else ""
            if key == "top":
                cell = "<br>".join(f"{esc(shown(w))} {q:.3f}" for w, q in c["top"])
            else:
                cell = esc(value(c))
            style = f" style='{rgb(c['p'])}'" if key == "p" else ""
            out.append(f"<td data-row={key}{klass}{style}>{cell}</td>")
        out.append("</tr>")
    out.append("</table></div><p class=small>Yellow: the masked positions m; red in x_corrupt "
               "and is_replaced: the tokens that differ from x; D says: green where D is right, "
               "violet where it is wrong (the colours of Figure 2's picture).</p>")
    return out
