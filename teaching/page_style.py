"""The Annotated ELECTRA's page template and style sheet (teaching/annotate.py fills the one and
writes the other, with Pygments' colours for the code, as out_annotated/style.css).

Plain HTML and CSS, no script and nothing fetched: the pages open from disk. Two columns, the
notes beside the code, on a wide screen; one column, nothing wider than the screen, on a phone
(tests/test_annotate_browser.py checks both in headless Chromium).
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="teaching/annotate.py">
<title>{title}</title>
<link rel="stylesheet" href="style.css">
</head>
<body>
<nav class="top">{nav}</nav>
{body}
<nav class="bottom">{nav}</nav>
</body>
</html>
"""

STYLE = """/* The Annotated ELECTRA: written by teaching/annotate.py; edit teaching/page_style.py. */
*, *::before, *::after { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
       sans-serif; color: #1d1d1f; background: #fff; }
a { color: #0b57d0; }
nav { display: flex; flex-wrap: wrap; gap: .4em 1.2em; align-items: baseline;
      padding: .6em 1.2rem; background: #f4f4f6; border-bottom: 1px solid #ddd; font-size: .95em; }
nav.bottom { border-top: 1px solid #ddd; border-bottom: none; margin-top: 2em; }
nav .home { font-weight: 600; margin-right: auto; }
header.intro, .wide, .index { max-width: 62rem; margin: 0 auto; padding: 1rem 1.2rem; }
h1 { font-size: 1.8em; margin: .4em 0 .2em; }
h1 code { font-size: .95em; }
.lead { font-size: 1.12em; color: #333; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
p code, li code, td code { background: #f1f1f4; padding: 0 .2em; border-radius: 3px; }
header.intro pre, .notes pre { background: #f7f7f9; border-left: 3px solid #c9c9d6;
      padding: .5em .8em; overflow-x: auto; line-height: 1.4; }
figure { margin: 1.5em auto; max-width: 62rem; padding: 0 1.2rem; }
figure.table { max-width: 84rem; }
figure img { display: block; max-width: 100%; height: auto; margin: 0 auto;
             border: 1px solid #e4e4e8; }
.figure-scroll { display: block; overflow-x: auto; }
figcaption { font-size: .92em; color: #444; margin-top: .5em; }
.table-scroll { overflow-x: auto; border: 1px solid #e4e4e8; width: fit-content; max-width: 100%;
                margin: 0 auto; }
figure.table figcaption { max-width: 59.6rem; margin-left: auto; margin-right: auto; }
table.step { border-collapse: collapse; font-size: 14px; margin: 0; }
table.step th, table.step td { padding: .25em .5em; border-bottom: 1px solid #eee;
      text-align: center; white-space: nowrap; }
table.step th { text-align: left; background: #f7f7f9; position: sticky; left: 0; }
table.step td.m { background: #fff3c4; }
table.step td.replaced { background: #ffd6d6; font-weight: 600; }
/* The two columns: notes left, code right; a narrow window stacks them (see @media). */
main { border-top: 1px solid #e4e4e8; }
.section { display: grid; grid-template-columns: minmax(0, 2fr) minmax(0, 3.3fr);
           border-bottom: 1px solid #f0f0f3; }
.notes { padding: .4em 1.4em .4em 1.2rem; font-size: .95em; }
.notes p:first-child { margin-top: .5em; }
.code { background: #f8f8fa; border-left: 1px solid #e4e4e8; min-width: 0; }
.code pre { margin: 0; padding: .6em 1em; overflow-x: auto; line-height: 1.45; }
.code .line { display: block; text-align: right; padding: .25em .6em 0; margin-bottom: -.4em;
              font-size: 11px; line-height: 1.2; color: #999; font-family: system-ui, sans-serif;
              text-decoration: none; }
h2.banner { margin: 0; padding: .8em 1.2rem .3em; font-size: 1.25em; background: #fff;
            border-bottom: 2px solid #e4e4e8; }
ol.path li { margin: .5em 0; }
.optional { color: #7a5200; }
.repo pre { overflow-x: auto; font-size: 13px; background: #f7f7f9; padding: .8em; }
.repo pre.repo-prose { white-space: pre-wrap; overflow-wrap: anywhere; }
p.optional { border-left: 3px solid #e0b050; padding-left: .6em; }
/* Typeset math: a display equation scrolls in its own box, never the page. */
.math { overflow-x: auto; overflow-y: hidden; max-width: 100%; margin: .5em 0; }
/* A font with OpenType MATH tables draws a display ∑ large, its limits clear of it: macOS and
   iOS have STIX Two Math, Windows Cambria Math, Linux DejaVu Math TeX Gyre (Debian's
   fonts-dejavu-extra) or Latin Modern Math. Chromium's generic `math` alone found none here. */
math { font-size: 1em; font-family: "STIX Two Math", "Cambria Math", "Latin Modern Math",
       "DejaVu Math TeX Gyre", "Libertinus Math", "Noto Sans Math", math; }
math[display="block"] { margin: .2em 0; }
/* Without such a font the limits of ∑ would touch it: a gap of their own, small enough
   beside a MATH font's. */
munderover > :nth-child(3), mover > :nth-child(2) { padding-bottom: .15em; }
munderover > :nth-child(2), munder > :nth-child(2) { padding-top: .1em; }
mtd { text-align: left; padding: .2em 1em .2em 0; math-style: normal; }
mtext { white-space: nowrap; }    /* Chromium drops the second line of a wrapped mtext */
mtr:has(munder, munderover, mover) > mtd { padding-block: .4em; }   /* limits: room */
details.aside { border-left: 3px solid #d4d4de; padding: .1em .7em; margin: .6em 0;
                color: #444; background: #fafafc; }
details.aside summary { cursor: pointer; color: #666; font-size: .9em; }
/* x̂ in a code font: many monospace fonts set the combining hat beside the x ("x ˆ"); a
   text font puts it on the letter. */
.acc { font-family: "DejaVu Sans", "Noto Sans", "Segoe UI", sans-serif; }
/* "scroll sideways": shown only where a wide picture or table scrolls in its own box */
.scroll-cue { display: none; font-size: .85em; color: #666; margin: .2em 0 0; }
ol.path .file { font-weight: 600; }
/* A table among the notes (ablations.py's flags): rows ruled, cells top-aligned, and on a
   phone it scrolls in its own box rather than crushing its columns. */
header.intro table, .notes table { border-collapse: collapse; margin: .8em 0; display: block;
      overflow-x: auto; max-width: 100%; }
header.intro th, header.intro td, .notes th, .notes td { text-align: left; vertical-align: top;
      padding: .3em .8em .3em 0; border-bottom: 1px solid #e4e4e8; }
header.intro th, .notes th { border-bottom: 2px solid #d4d4de; }
@media (max-width: 56rem) {
  /* Shrunk to a phone's width a picture would set its text at 5-6 px: it keeps at least 4/5
     of its own width (--w, set by teaching/annotate.py) and scrolls sideways in its box. */
  figure img[style] { max-width: none; width: clamp(calc(var(--w) * .8), 100%, var(--w)); }
  .scroll-cue { display: block; }
  /* a table among the notes (ablations.py's three columns) fits a phone: smaller, closer */
  header.intro table, .notes table { font-size: .88em; }
  header.intro table code, .notes table code { font-size: .9em; }
  header.intro th, header.intro td, .notes th, .notes td { padding-right: .5em; }
  .section { grid-template-columns: minmax(0, 1fr); }
  .code { border-left: none; border-top: 1px solid #e4e4e8; }
  .notes { padding: .3em 1rem; }
  body { font-size: 15px; }
}
"""
