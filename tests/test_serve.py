"""analysis/serve.py: the page in the browser, on a tiny checkpoint served on a free port inside
the test - the inspector's numbers, the rows of one step, every bad input answered with a
message and a 4xx while the server goes on, 20 requests at once, the start-up errors in one
line, and the page as headless Chromium draws it."""
import http.client
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from analysis import figure2 as fig2
from analysis import inspect_discriminator as insp
from analysis import serve, serve_page
from analysis.analyses import d_probs, encode, pieces, shown
from conftest import HANG, one_token_discriminator, run_cli, save_tiny
from data import load_tokenizer
from teaching import one_step

TEXT = "the cat sees the ball in the morning."
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, learnable_data_dir):
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "ckpt.pt",
                     load_tokenizer(learnable_data_dir))


def start(inspector):
    srv = serve.bind("127.0.0.1", 0, inspector, quiet=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def server(tiny, one_thread):
    srv = start(serve.Inspector(tiny))
    yield srv
    srv.shutdown()
    srv.server_close()


def request(srv, target="/", method="GET", body=None, headers=None, query=None):
    """(status, page text, headers) of one request."""
    if query is not None:
        target += "?" + urllib.parse.urlencode(query)
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_port, timeout=60)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8"), dict(r.getheaders())
    finally:
        conn.close()


class Page(HTMLParser):
    """What a page shows: the tokens with their P(replaced), the step table's rows, messages."""

    def __init__(self, text):
        super().__init__()
        self.tokens, self.rows, self.msg, self._in = [], {}, [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-p" in a:
            self.tokens.append([float(a["data-p"]), ""])
            self._in = ("tok", tag)
        elif tag == "td" and "data-row" in a:
            self.rows.setdefault(a["data-row"], []).append("")
            self._in = ("row", a["data-row"])
        elif tag == "p" and a.get("class") in ("msg", "note"):
            self.msg.append("")
            self._in = ("msg", tag)

    def handle_endtag(self, tag):
        if self._in and tag in ("span", "button", "td", "p") and \
                (self._in[0] == "row" and tag == "td" or self._in[1] == tag):
            self._in = None

    def handle_data(self, data):
        if self._in is None:
            return
        kind, key = self._in
        if kind == "tok" and not self.tokens[-1][1]:
            self.tokens[-1][1] = data               # the token; its value follows in <small>
        elif kind == "row":
            self.rows[key][-1] += data
        elif kind == "msg":
            self.msg[-1] += data


# ----------------------------------------------------------------------------- the numbers

def test_p_replaced_is_the_inspectors(server, tiny):
    model, tok, cfg = insp.load(tiny)                # the inspector's own loading and functions
    for text in (TEXT, "a dog likes the river", "The chef cooked the meal."):
        status, body, headers = request(server, query=dict(text=text))
        assert status == 200 and "<script" not in body
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        x = encode(tok, text, cfg.seq_len)
        with torch.inference_mode():
            ref = d_probs(model, tok, [x])[0]
        page = Page(body)
        assert [w for _, w in page.tokens] == [shown(w) for w in pieces(tok, x)]
        assert [p for p, _ in page.tokens] == [round(float(q), 3) for q in ref]


def test_hand_chosen_step_is_figure2_and_follows_the_algorithm(server, tiny):
    model, tok, cfg = insp.load(tiny)
    status, body, _ = request(server, query=dict(text=TEXT, mask="1,ball,5", seed=7, k=3))
    assert status == 200, Page(body).msg
    rows = Page(body).rows
    with torch.inference_mode():
        tr = fig2.figure2_trace(model, tok, TEXT, ["1", "ball", "5"], 3, 7, cfg.seq_len)
    assert rows["p"] == [f"{float(q):.3f}" for q in tr["p_replaced"][0]]
    assert rows["x_corrupt"] == [shown(w) for w in pieces(tok, tr["x_corrupt"][0])]
    masked = [t for t, v in enumerate(rows["m"]) if v == "✓"]
    assert masked == sorted(tr["m"][0].tolist()) and len(masked) >= 3
    names = [str(t - 1) for t in masked]              # the line above the table names them
    assert f"masked: tokens {', '.join(names[:-1])} and {names[-1]}, in yellow" in body
    for t, (x, xm, xh, xc, rep) in enumerate(zip(rows["x"], rows["x_masked"], rows["x_hat"],
                                                 rows["x_corrupt"], rows["is_replaced"])):
        if t in masked:                         # shown as [MASK]; x_corrupt takes the sample
            assert xm == "[MASK]" and xc == xh and rows["top"][t]
        else:                                   # outside m nothing changes
            assert xm == x == xc and xh == "" and rep == "0" and rows["top"][t] == ""
        assert (rep == "1") == (xc != x)        # is_replaced compares x_corrupt with x


def test_a_sample_equal_to_the_original_is_real(server, tiny, monkeypatch):
    _, tok, cfg = insp.load(tiny)
    x = torch.tensor([encode(tok, TEXT, cfg.seq_len)])
    m = [2, 4]                                              # tokens 1 and 3
    orig = x[0, m]
    forced = torch.stack([orig[0], (orig[1] + 1) % (tok.vocab_size - 4)])[None]
    monkeypatch.setattr(fig2, "sample", lambda logits, generator=None: forced)
    status, body, _ = request(server, query=dict(text=TEXT, mask="1,3"))
    rows = Page(body).rows
    assert status == 200 and [rows["m"][t] for t in m] == ["✓", "✓"]
    assert rows["x_corrupt"][2] == rows["x"][2] and rows["is_replaced"][2] == "0"   # real
    assert rows["x_corrupt"][4] != rows["x"][4] and rows["is_replaced"][4] == "1"
    assert rows["is_replaced"].count("1") == 1


def test_drawn_step_is_one_steps_table(server, tiny):
    """15 % drawn as training draws them: the table teaching/one_step.py writes for the same
    text and seed (85 % of the chosen tokens shown as [MASK], the rest kept)."""
    model, tok, cfg, _ = one_step.load(tiny)
    for seed in (0, 3):
        status, body, _ = request(server, query=dict(text=TEXT, mode="draw", seed=seed))
        rows = Page(body).rows
        ref = one_step.one_step(model, tok, cfg, TEXT, seed)
        assert status == 200
        assert [t for t, v in enumerate(rows["m"]) if v] == ref["m"]
        assert rows["is_replaced"] == [str(v) for v in ref["rows"]["is_replaced"]]
        assert rows["x_masked"].count("[MASK]") == ref["rows"]["x_masked"].count("[MASK]")
        for ours, theirs in zip(rows["p"], ref["rows"]["p_replaced"], strict=True):
            assert abs(float(ours) - float(theirs)) <= 0.0051      # 3 decimals against 2


def test_clicking_a_token_toggles_it(server, tiny):
    _, tok, cfg = insp.load(tiny)
    ball = [t - 1 for t in fig2.choose_positions(pieces(tok, encode(tok, TEXT, cfg.seq_len)),
                                                 ["ball"])]     # the word's pieces
    status, _, headers = request(server, query=dict(text=TEXT, mask="1,ball", toggle=3))
    assert status == 303 and 3 not in ball
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(headers["Location"]).query)
    now = sorted([1, 3] + ball)
    assert q["mask"] == [",".join(map(str, now))] and q["mode"] == ["mine"] and q["text"] == [TEXT]
    status, _, headers = request(server, query=dict(text=TEXT, mask=q["mask"][0], toggle=3))
    assert status == 303 and urllib.parse.parse_qs(urllib.parse.urlsplit(
        headers["Location"]).query)["mask"] == [",".join(map(str, [1] + ball))]


def test_long_text_is_cut_and_says_so(server, tiny):
    _, tok, cfg = insp.load(tiny)
    status, body, _ = request(server, query=dict(text=TEXT * 20))
    page = Page(body)
    assert status == 200 and len(page.tokens) == cfg.seq_len
    assert any("is cut" in m and f"{len(tok.encode(TEXT * 20))} tokens" in m for m in page.msg)


def test_the_example_sentence_is_of_the_checkpoints_own_text(tiny, learnable_data_dir, tmp_path,
                                                            one_thread):
    """The page suggests a sentence of the validation text the checkpoint was trained on (the
    one the inspector's figure2 picks), not the paper's chef, which means little to a model of
    Python's documentation; where that folder is gone, the paper's example, said as such."""
    ckpt = torch.load(tiny, map_location="cpu", weights_only=True)
    own = tmp_path / "own.pt"
    torch.save(dict(ckpt, data_dir=str(learnable_data_dir)), own)
    args = type("A", (), dict(data=str(learnable_data_dir), seed=0, mask=None))
    _, tok, cfg = insp.load(own)
    picked = insp.default_sentence(args, tok, cfg)[0]
    for path, sentence, whose in [(own, picked, "one of its validation sentences"),
                                  (tiny, insp.PAPER_SENTENCE, "the paper's example")]:
        srv = start(serve.Inspector(path))
        try:
            status, body, _ = request(srv)
            assert status == 200 and f"placeholder='e.g. {serve_page.esc(sentence)}'" in body
            assert f"{whose}: “{serve_page.esc(sentence)}”" in body
            status, body, _ = request(srv, query=dict(text=" "))
            assert status == 400 and any(sentence in m for m in Page(body).msg)
        finally:
            srv.shutdown()
            srv.server_close()
    assert picked != insp.PAPER_SENTENCE


# ----------------------------------------------------------------------------- bad input

BAD = [  # (what, request arguments, status, words of the message)
    ("empty text", dict(query=dict(text="")), 400, "text is empty"),
    ("blank text", dict(query=dict(text=" \n ")), 400, "text is empty"),
    ("non-UTF-8 text", dict(target="/?text=%ff%fe"), 400, "not valid UTF-8"),
    ("non-UTF-8 body", dict(method="POST", body=b"text=caf%e9", headers={
        "Content-Type": "application/x-www-form-urlencoded"}), 400, "not valid UTF-8"),
    ("unknown path", dict(target="/admin"), 404, "No page at /admin"),
    ("a path up", dict(target="/../../etc/passwd"), 404, "No page"),
    ("an Annotated path up", dict(target="/annotated/../README.md"), 404, "No Annotated page"),
    ("malformed query", dict(target="/?text"), 400, "Malformed query"),
    ("malformed query &&", dict(target="/?text=a&&=b"), 400, "Malformed query"),
    ("unknown field", dict(target="/?text=a&file=/etc/passwd"), 400, "Unknown field 'file'"),
    ("field twice", dict(target="/?text=a&text=b"), 400, "given twice"),
    ("seed not a number", dict(query=dict(text=TEXT, seed="1e3")), 400, "seed must be"),
    ("top-k 0", dict(query=dict(text=TEXT, k=0)), 400, "top-k must be"),
    ("unknown mode", dict(query=dict(text=TEXT, mode="eval")), 400, "mode must be"),
    ("mask out of range", dict(query=dict(text=TEXT, mask="1,40")), 400,
     "Mask position 40 is out of range"),
    ("mask negative", dict(query=dict(text=TEXT, mask="-1")), 400, "out of range"),
    ("mask a 23-digit number", dict(query=dict(text=TEXT, mask="9" * 23)), 400,
     "Mask position 999999999999... is out of range"),
    ("mask word not there", dict(query=dict(text=TEXT, mask="pizza")), 400, "no such"),
    ("click out of range", dict(query=dict(text=TEXT, toggle=99)), 400, "out of range"),
    ("huge body, announced", dict(method="POST", body=b"text=" + b"a" * 1000, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(10 ** 9)}),
     413, "at most 65,536"),
    ("huge body, sent", dict(method="POST", body=b"text=" + b"a" * 200_000, headers={
        "Content-Type": "application/x-www-form-urlencoded"}), 413, "at most 65,536"),
    ("a multipart form", dict(method="POST", body=b"--x--", headers={
        "Content-Type": "multipart/form-data; boundary=x"}), 415, "x-www-form-urlencoded"),
    ("PUT", dict(method="PUT", body=b"x"), 405, "Only GET and POST"),
    ("another Host", dict(headers={"Host": "evil.example:80"}), 403, "127.0.0.1 or localhost"),
]


@pytest.mark.parametrize("what,args,status,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_message_and_a_4xx_and_the_server_goes_on(server, what, args, status,
                                                                   words):
    got, body, _ = request(server, **args)
    page = Page(body)
    assert got == status and any(words in m for m in page.msg), (got, page.msg)
    assert "Traceback" not in body
    got, body, _ = request(server, query=dict(text=TEXT))           # the next one still works
    assert got == 200 and len(Page(body).tokens) > 2


def test_text_from_a_request_is_escaped_never_markup(server):
    status, body, _ = request(server, query=dict(text="<script>alert(1)</script> 'x' \"y\"",
                                                 mask="<b>"))
    assert status == 400 and "<script>" not in body and "<b>" not in body
    assert "&lt;script&gt;" in body


def test_a_broken_request_line_is_answered_and_the_server_goes_on(server):
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=30) as s:
        s.sendall(b"NONSENSE\r\n\r\n")                     # answered as HTTP/0.9: no headers
        assert b"400: Bad request" in s.recv(200)
    assert request(server)[0] == 200


def test_a_refused_request_line_is_answered_with_the_log_on(tiny, one_thread, capsys):
    # the command logs a line per request: a refusal before the path is parsed still gets its
    # answer (the log line once read self.path, which such a request never has)
    srv = serve.bind("127.0.0.1", 0, serve.Inspector(tiny), quiet=False)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(("127.0.0.1", srv.server_port), timeout=30) as s:
            s.sendall(b"\x00garbage\r\n\r\n")
            assert b"400" in s.recv(200)
        long_text = "the cat sat on the mat " * 3000            # 69,000 bytes in the address
        status, body, _ = request(srv, query=dict(text=long_text))
        assert status == 414 and any("paste a shorter text" in m for m in Page(body).msg)
        assert request(srv, query=dict(text=TEXT))[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
    assert "failed" not in capsys.readouterr().err


def test_twenty_concurrent_requests_all_get_answers(server):
    texts = [f"the cat sees {i} balls" for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda t: request(server, query=dict(text=t, mask="0")), texts))
    assert [a[0] for a in answers] == [200] * 20
    for t, (_, body, _) in zip(texts, answers):         # each its own text, none mixed up
        assert f">{t}</textarea>" in body and Page(body).rows["m"][1] == "✓"


def test_annotated_pages_by_name_only(tiny, tmp_path, one_thread):
    (tmp_path / "objectives.html").write_text("<p>objectives</p>")
    (tmp_path / "notes.txt").write_text("not listed")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "plot.png").write_bytes(b"a picture")        # a page's figure
    inspector = serve.Inspector(tiny)
    inspector.annotated = serve.list_annotated(tmp_path)
    srv = start(inspector)
    try:
        assert "/annotated/objectives.html" in request(srv)[1]
        assert request(srv, "/annotated/objectives.html")[:2] == (200, "<p>objectives</p>")
        status, _, head = request(srv, "/annotated/figures/plot.png")
        assert status == 200 and head["Content-Type"] == "image/png"
        for target in ("/annotated/notes.txt", "/annotated/%2e%2e/README.md",
                       "/annotated/plot.png", "/annotated/figures/../notes.txt",
                       "/annotated/" + str(tmp_path / "objectives.html")):
            assert request(srv, target)[0] == 404
    finally:
        srv.shutdown()
        srv.server_close()


# ----------------------------------------------------------------------------- start-up

def test_startup_errors_are_one_line(tiny, learnable_data_dir, tmp_path, capsys):
    bert = save_tiny(tmp_path / "bert.pt", load_tokenizer(learnable_data_dir), model="bert")
    cut = tmp_path / "cut.pt"
    cut.write_bytes(Path(tiny).read_bytes()[:5000])
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        cases = [(["--ckpt", tmp_path / "missing.pt"], "no such checkpoint file"),
                 (["--ckpt", cut], "truncated"),
                 (["--ckpt", Path(tiny).parent], f"is a folder, not a checkpoint file: give "
                  f"the file, e.g. {tiny}"),
                 (["--ckpt", bert], "BERT checkpoint has no discriminator"),
                 (["--ckpt", tiny, "--port", busy.getsockname()[1]], "is in use")]
        for args, words in cases:
            args = [*map(str, args)] + ([] if "--port" in args else ["--port", "0"])
            assert serve.main(args) == 1, args
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("error:") and words in err[0], err
        r = run_cli("analysis/serve.py", "--ckpt", bert, "--port", "0")
        assert r.returncode == 1 and "Traceback" not in r.stderr
        assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    finally:
        busy.close()


def test_every_address_prints_one_a_browser_opens(tiny, one_thread):
    srv = serve.bind("0.0.0.0", 0, None, quiet=True)      # 0.0.0.0 is no address to open
    try:
        assert srv.url() == f"http://127.0.0.1:{srv.server_port}/" and not srv.local_only
    finally:
        srv.server_close()


def test_the_command_prints_its_address_and_serves(tiny):
    p = subprocess.Popen([sys.executable, "analysis/serve.py", "--ckpt", str(tiny), "--port", "0",
                          "--quiet"], cwd=serve.ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(HANG, p.kill)                # a guard against a hang, not a limit
    guard.start()
    try:
        line = p.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert url, line + p.stderr.read()
        conn = http.client.HTTPConnection("127.0.0.1", int(url.group(1)), timeout=60)
        conn.request("GET", "/?" + urllib.parse.urlencode(dict(text=TEXT)))
        assert conn.getresponse().status == 200
    finally:
        guard.cancel()
        p.terminate()
        p.wait(timeout=60)


def test_a_student_copy_with_a_blank_part_says_so_on_the_page_and_in_one_line(tiny, tmp_path):
    """In a copy whose Part 1 (mask) is blank, the inspector's drawn step is one `error:` line
    and the page's a message (501) naming the part; the sentence view needs no blank part."""
    from teaching import make_assignment
    copy = tmp_path / "student"
    make_assignment.make_copy(copy, ["mask"])
    r = subprocess.run([sys.executable, "analysis/inspect_discriminator.py", "figure2", "--ckpt",
                        str(tiny), TEXT, "--mask", "draw", "--out", str(tmp_path / "insp")],
                       cwd=copy, capture_output=True, text=True, timeout=HANG)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and "not done yet: Part 1 (mask" in lines[0], lines
    assert not (tmp_path / "insp").exists()
    p = subprocess.Popen([sys.executable, "analysis/serve.py", "--ckpt", str(tiny), "--port", "0"],
                         cwd=copy, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(HANG, p.kill)                # a guard against a hang, not a limit
    guard.start()
    try:
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", p.stdout.readline()).group(1))
        srv = type("Srv", (), {"server_port": port})
        status, body, _ = request(srv, query=dict(text=TEXT, mode="draw"))
        assert status == 501 and any("not done yet: Part 1 (mask" in m and "ASSIGNMENTS.md" in m
                                     for m in Page(body).msg), (status, Page(body).msg)
        status, body, _ = request(srv, query=dict(text=TEXT))
        assert status == 200 and len(Page(body).tokens) > 2
    finally:
        guard.cancel()
        p.terminate()
        p.wait(timeout=60)
    assert "internal error" not in p.stderr.read()


# ----------------------------------------------------------------------------- the browser

def shot(url, out, width):
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={out.parent / ('profile%d' % width)}",
                    f"--screenshot={out}", f"--window-size={width},900", url],
                   capture_output=True, timeout=300)
    import matplotlib.image
    return (matplotlib.image.imread(out)[..., :3] * 255).round()   # PNG: floats 0 to 1


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium to render "
                    "the page")
def test_chromium_shows_the_coloured_tokens(tiny, tmp_path, one_thread):
    inspector = serve.Inspector(tiny)
    red_id = inspector.tok.encode(" ball")[0]
    inspector.model.discriminator = one_token_discriminator(red_id, 6.0)          # this test's own model
    srv = start(inspector)
    try:
        url = f"http://127.0.0.1:{srv.server_port}/?" + urllib.parse.urlencode(dict(text=TEXT))
        for width in (1280, 420):
            img = shot(url, tmp_path / f"page{width}.png", width)
            assert img.shape[1] == width
            px = torch.from_numpy(img).double()
            near = lambda p: ((px - torch.tensor(serve_page.colour(p), dtype=torch.float64))  # noqa
                              .abs().max(-1).values <= 2).sum().item()
            red = near(torch.sigmoid(torch.tensor(6.0)).item())      # " ball", and only it
            assert 300 < red < 6000, f"{red} pixels of the red token's colour at width {width}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_one_colour_one_meaning_in_the_step_table():
    # red is "replaced" (x_corrupt, is_replaced) and D's P(replaced): D's wrong verdicts need
    # a colour of their own, as in Figure 2's picture
    css = dict(re.findall(r"td\.(\w+)\{background:(#[0-9a-f]{6})\}", serve_page.CSS))
    assert len(set(css[k] for k in ("m", "rep", "right", "wrong"))) == 4, css
    assert css["wrong"] == fig2.WRONG and css["right"] == fig2.RIGHT
