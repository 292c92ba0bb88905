"""Teaching: how close a submitted body is to the reference body, for the instructor only.

The reference answers are public (they are this repository), so the autograder carries each
graded part's reference body as tokens (tests/hidden/reference.json, written by
teaching/make_assignment.py --autograder) and the grader compares each submitted body with it:
Python's tokens, comments, blank lines, indentation width and string contents dropped, and every
name the body assigns (its own variables) renamed in order of first use, so that renaming
variables and reformatting change nothing; names it only reads (torch.rand, self.qkv, the
arguments) are kept. The similarity is difflib's ratio of the two token lists (1.0: the same).
A body at NEAR_COPY or above is listed in results.json in an entry Gradescope shows to
instructors only (`hidden`), with its similarity; it is never scored down. Short bodies (a
two-line loss) are alike in most correct answers: the entry is a prompt to read, not a verdict.
It imports nothing of the project."""
import ast
import difflib
import io
import keyword
import textwrap
import tokenize

NEAR_COPY = 0.9
FILE = "tests/hidden/reference.json"     # in the grader's copy, beside the hidden tests


def assigned(tree):
    """The names a body binds: assignment and loop targets, with/except names, comprehension
    variables, local functions and their arguments."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg) and node.arg != "self":
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def tokens(lines):
    """The normalised tokens of a body (its lines, without the function's indentation); [] for
    one that does not parse."""
    text = textwrap.dedent("\n".join(lines)) + "\n"
    try:
        own = assigned(ast.parse(text))
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, IndentationError, ValueError):
        return []
    names, out = {}, []
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER}
    for t in toks:
        if t.type in skip:
            continue
        if t.type == tokenize.NAME and t.string in own and not keyword.iskeyword(t.string):
            out.append(f"v{names.setdefault(t.string, len(names))}")
        elif t.type == tokenize.STRING:
            out.append("S")
        elif t.type in (tokenize.INDENT, tokenize.DEDENT):
            out.append(tokenize.tok_name[t.type])
        else:
            out.append(t.string)
    return out


def similarity(a, b):
    """The ratio of two token lists, 0.0 when either is empty."""
    if not a or not b:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
