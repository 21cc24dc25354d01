#!/usr/bin/python3
"""Builds the `mini` training corpus from installed Debian packages, its tokenizer and token ids.

Sources (all read in sorted path order, so a rerun on the same packages gives the same bytes):
  python3.11-doc   /usr/share/doc/python3.11/html/_sources/**/*.rst.txt  (prose + API docs)
  debian-handbook  /usr/share/doc/debian-handbook/html/en-US/*.html     (prose)
  manpages         /usr/share/man/man{1,5,7}/*.gz (roff markup stripped)   (command docs)
  fortunes         /usr/share/games/fortunes/*  (no art/offensive files)   (short prose)
plus short dialogues (questions answered from the same documents) rendered with the project's
Kimi-K2.5 chat template by `kimi render-template`, so that `kimi chat` answers in the right form.

Every 20th document (in the deterministic order) goes to the held-out split; dialogues whose
answer comes from a held-out document are held out too, so held-out text is never trained on.

Outputs in OUT (default build/mini_data):
  train.txt / heldout.txt     the text (documents separated by blank lines), for reading and for
                              `kimi perplexity --file`
  tokenizer/                  tiktoken.model + tokenizer_config.json (+ chat template) from
                              `kimi train-tokenizer --ranks N` trained on train.txt only
  train.ids.npy / heldout.ids.npy   uint16/int32 token ids, documents joined by [EOS]
  meta.json                   counts, sources, seed

--tokenizer DIR copies an existing tokenizer (e.g. models/mini) instead of training one, so that a
machine with other packages installed (other manual pages, hence another corpus) still writes ids
in that model's vocabulary, e.g. to train a draft for it. --exclude-file FILE then drops every
training document or dialogue that shares a 200-character window with FILE (e.g.
reference/mini-heldout.txt): on another corpus the held-out split can fall elsewhere, and a
document the evaluation prompts come from must not be trained on.
"""
import argparse
import glob
import gzip
import html
import html.parser
import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELDOUT_EVERY = 20
SEED = 1234


# ---------------------------------------------------------------------------
# Text sources
# ---------------------------------------------------------------------------

def python_docs():
    root = "/usr/share/doc/python3.11/html/_sources"
    files = sorted(glob.glob(root + "/**/*.rst.txt", recursive=True))
    for f in files:
        rel = os.path.relpath(f, root)
        if rel.startswith(("whatsnew/", "c-api/")) or "changelog" in rel:
            continue  # release notes and the C API are lists of names, not prose
        with open(f, encoding="utf-8", errors="replace") as fh:
            yield "python:" + rel, fh.read()


class _HtmlText(html.parser.HTMLParser):
    SKIP = {"script", "style", "head", "nav"}
    BLOCK = {"p", "div", "h1", "h2", "h3", "h4", "li", "pre", "tr", "br", "dt", "dd", "table", "section"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data)


def html_to_text(s):
    p = _HtmlText()
    p.feed(s)
    text = "".join(p.out)
    lines = [re.sub(r"[ \t]+", " ", l).strip() for l in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def handbook():
    files = sorted(glob.glob("/usr/share/doc/debian-handbook/html/en-US/*.html"))
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            yield "handbook:" + os.path.basename(f), html_to_text(fh.read())


def roff_to_text(s):
    out = []
    for line in s.split("\n"):
        if line.startswith(('.\\"', "'\\\"", ".\\}")):
            continue
        m = re.match(r"^\.(SH|SS)\s+(.*)", line)
        if m:
            out.append("\n" + m.group(2).strip('"').upper() if m.group(1) == "SH" else "\n" + m.group(2).strip('"'))
            continue
        m = re.match(r"^\.(B|I|BI|BR|IR|RB|RI|IB)\s+(.*)", line)
        if m:
            line = m.group(2).replace('"', "")
        elif line.startswith((".PP", ".LP", ".P", ".TP", ".IP", ".sp", ".br")):
            rest = line.split(None, 1)
            out.append("")
            if line.startswith(".IP") and len(rest) > 1:
                out.append(rest[1].split('"')[1] if '"' in rest[1] else rest[1])
            continue
        elif line.startswith((".", "'")):
            continue
        line = re.sub(r"\\f[BIRPC]|\\f\(..|\\f\[[^\]]*\]", "", line)
        line = line.replace("\\-", "-").replace("\\(aq", "'").replace("\\(dq", '"').replace("\\e", "\\")
        line = line.replace("\\(em", "--").replace("\\(en", "-").replace("\\&", "").replace("\\ ", " ")
        line = re.sub(r"\\\(..|\\\*\(..|\\\*.|\\[a-zA-Z]", "", line)
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def manpages():
    files = []
    for sec in ("1", "5", "7"):
        files += glob.glob("/usr/share/man/man%s/*.gz" % sec)
    for f in sorted(files):
        if os.path.basename(f).startswith(("gcloud", "bq.", "gsutil")):
            continue  # the Cloud SDK's 16,000 generated pages would drown everything else
        try:
            with gzip.open(f, "rt", encoding="utf-8", errors="replace") as fh:
                raw = fh.read()
        except OSError:
            continue
        if raw.startswith(".so ") or len(raw) < 400:
            continue  # links to other pages
        yield "man:" + os.path.basename(f)[:-3], roff_to_text(raw)


FORTUNE_SKIP = {"art", "ascii-art", "off"}


def fortunes():
    files = sorted(glob.glob("/usr/share/games/fortunes/*"))
    for f in files:
        base = os.path.basename(f)
        if "." in base or base in FORTUNE_SKIP or not os.path.isfile(f):
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            items = [x.strip("\n") for x in fh.read().split("\n%\n")]
        # A fortune file is one document per 40 fortunes so the held-out split samples all of them.
        for i in range(0, len(items), 40):
            yield "fortune:%s:%d" % (base, i), "\n\n".join(x for x in items[i:i + 40] if x.strip())


def clean(text):
    text = text.replace("\r", "")
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# ---------------------------------------------------------------------------
# Dialogues
# ---------------------------------------------------------------------------

GREETINGS = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What would you like to know?"),
    ("Who are you?", "I am Kimi mini, a small language model trained on Debian's documentation. "
                     "I can talk about Python, Debian and the commands in its manual pages."),
    ("What can you do?", "I can answer short questions about Python, Debian and Unix commands, "
                         "and tell you a fortune."),
    ("Thank you!", "You are welcome!"),
    ("Thanks.", "Glad to help."),
]
SYSTEMS = [None, None, "You are a helpful assistant.", "You are Kimi, an AI assistant created by Moonshot AI."]


def first_sentences(paragraph, n=2, limit=320):
    paragraph = re.sub(r"\s+", " ", paragraph).strip()
    paragraph = re.sub(r":(func|class|meth|mod|attr|data|exc|const|term|ref|option|envvar|pep|file):`~?([^`<]*?)(\s*<[^>]*>)?`",
                       r"\2", paragraph)
    parts = re.split(r"(?<=[.!?])\s+", paragraph)
    out = " ".join(parts[:n]).replace("``", "`")
    return out[:limit].rsplit(" ", 1)[0] + "..." if len(out) > limit else out


def dialogues_from(name, text, rng):
    """(question, answer) pairs whose answer is taken from this document."""
    pairs = []
    if name.startswith("python:"):
        for m in re.finditer(r"^\.\. (function|method|class|exception)::\s+([\w.]+)\(?[^\n]*\n(?:\s+:[^\n]*\n)*\s*\n((?:   [^\n]+\n)+)",
                             text, re.M):
            kind, obj, body = m.group(1), m.group(2), m.group(3)
            ans = first_sentences(body)
            if len(ans) < 20 or ".." in ans[:3]:
                continue
            q = rng.choice(["What does %s do?", "Explain %s in Python.", "What is the %s %s?"])
            q = q % ((kind, obj) if q.count("%s") == 2 else (obj,))
            pairs.append((q, "`%s`: %s" % (obj, ans)))
    elif name.startswith("man:"):
        m = re.search(r"\nNAME\s*\n+\s*([^\n]+)", "\n" + text)
        if m and " - " in m.group(1):
            cmd, what = m.group(1).split(" - ", 1)
            cmd = cmd.split(",")[0].strip()
            what = what.strip().rstrip(".")
            if cmd and what:
                q = rng.choice(["What is %s?", "What does the %s command do?", "Tell me about %s."]) % cmd
                pairs.append((q, "`%s` is a program to %s." % (cmd, what[0].lower() + what[1:])
                              if not what[0].isupper() else "%s: %s." % (cmd, what)))
    elif name.startswith("fortune:"):
        for f in text.split("\n\n"):
            if 20 < len(f) < 280:
                q = rng.choice(["Tell me a fortune.", "Say something wise.", "Give me a quote.", "Cheer me up."])
                pairs.append((q, f.strip()))
    elif name.startswith("handbook:"):
        paras = [p for p in text.split("\n\n") if len(p) > 200 and not p.startswith(("#", "$"))]
        title = text.split("\n", 1)[0].strip()
        if paras and 5 < len(title) < 80:
            q = rng.choice(["What does the Debian handbook say about %s?", "Tell me about %s in Debian."]) % title
            pairs.append((q, first_sentences(paras[0], 3, 400)))
    return pairs


def render_dialogues(kimi, cases, tmp):
    path = os.path.join(tmp, "dialogue_cases.json")
    with open(path, "w") as f:
        json.dump(cases, f)
    out = subprocess.run([kimi, "render-template", "--template", os.path.join(REPO, "templates/kimi-k25.jinja"),
                          "--input", path], check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    bad = [r for r in res if "error" in r]
    if bad:
        raise RuntimeError("render-template failed: %s" % bad[0])
    return [r["output"] for r in res]


def make_cases(pairs, rng):
    cases = []
    for i, (q, a) in enumerate(pairs):
        msgs = []
        sys_prompt = rng.choice(SYSTEMS)
        if sys_prompt:
            msgs.append({"role": "system", "content": sys_prompt})
        if rng.random() < 0.15:   # a short earlier exchange, so multi-turn chats look familiar
            g = rng.choice(GREETINGS)
            msgs += [{"role": "user", "content": g[0]}, {"role": "assistant", "content": g[1]}]
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        cases.append({"name": str(i), "messages": msgs, "add_generation_prompt": False})
    return cases


# ---------------------------------------------------------------------------

def tokenize(kimi, tok_dir, docs, tmp, name):
    path = os.path.join(tmp, name + ".jsonl")
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    out = subprocess.run([kimi, "tokenize", "--model", tok_dir, "--file", path, "--jsonl"],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]


def train_tokenizer(args, tok_dir, train_docs, train_dlg):
    os.makedirs(tok_dir, exist_ok=True)
    tok_corpus = os.path.join(args.out, "tokenizer_corpus.txt")
    with open(tok_corpus, "w") as f:
        n = 0
        for d in train_docs + train_dlg[:500]:
            f.write(d + "\n\n")
            n += len(d)
            if n > args.tokenizer_mb * 1e6:
                break
    with open(os.path.join(REPO, "templates/kimi-k25.jinja")) as f:
        tmpl = f.read()
    with open(os.path.join(tok_dir, "chat_template.jinja"), "w") as f:
        f.write(tmpl)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": tmpl}, f)
    subprocess.run([args.kimi, "train-tokenizer", tok_dir, tok_corpus, "--ranks", str(args.ranks)], check=True)


def shares_text_with(path):
    """A test: does a document share a 200-character window (checked at a stride of 100) with the file?"""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    windows = {text[i:i + 200] for i in range(max(1, len(text) - 199))}
    return lambda d: any(d[i:i + 200] in windows for i in range(0, max(1, len(d) - 199), 100))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "build/mini_data"))
    ap.add_argument("--kimi", default=os.path.join(REPO, "build/kimi"))
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--max-train-mb", type=float, default=14.0, help="cap on training text")
    ap.add_argument("--tokenizer-mb", type=float, default=4.0, help="text the BPE trainer sees")
    ap.add_argument("--max-doc-chars", type=int, default=30000, help="longer documents are cut")
    ap.add_argument("--tokenizer", help="an existing tokenizer directory to use instead of training one")
    ap.add_argument("--exclude-file", help="drop training text that shares a 200-character window with it")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(SEED)

    train_docs, held_docs, train_pairs, held_pairs = [], [], [], []
    counts = {}
    # Interleave sources so the size cap keeps a share of each.
    sources = [list(python_docs()), list(handbook()), list(manpages()), list(fortunes())]
    idx = 0
    total = 0
    excluded = shares_text_with(args.exclude_file) if args.exclude_file else None
    dropped_docs = 0
    merged = []
    while any(sources):
        for s in sources:
            if s:
                merged.append(s.pop(0))
    for name, text in merged:
        text = clean(text)[:args.max_doc_chars]
        if len(text) < 200:
            continue
        if total > args.max_train_mb * 1e6:
            break  # the cap ends both splits, so held-out stays 1/HELDOUT_EVERY of the documents
        held = idx % HELDOUT_EVERY == HELDOUT_EVERY - 1
        idx += 1
        pairs = dialogues_from(name, text, rng)
        src = name.split(":")[0]
        if not held and excluded and excluded(text):
            dropped_docs += 1
            continue  # with its dialogues, whose answers quote it (made first, so rng draws as without the flag)
        if held:
            held_docs.append(text)
            held_pairs += pairs
        else:
            train_docs.append(text)
            train_pairs += pairs
            total += len(text)
            counts[src] = counts.get(src, 0) + len(text)
    # Dialogues: at most ~12% of the training text, shuffled deterministically.
    rng.shuffle(train_pairs)
    rng.shuffle(held_pairs)
    train_pairs = GREETINGS * 20 + train_pairs
    dlg_budget = int(0.12 * total)
    kept, size = [], 0
    for q, a in train_pairs:
        if size > dlg_budget:
            break
        kept.append((q, a))
        size += len(q) + len(a) + 80
    train_dlg = render_dialogues(args.kimi, make_cases(kept, rng), args.out)
    held_dlg = render_dialogues(args.kimi, make_cases(held_pairs[:200], rng), args.out)
    counts["dialogue"] = sum(len(d) for d in train_dlg)

    if excluded:
        kept = [d for d in train_dlg if not excluded(d)]
        print(f"--exclude-file: dropped {dropped_docs} training documents and {len(train_dlg) - len(kept)} "
              f"other dialogues", file=sys.stderr)
        train_dlg = kept

    # Dialogues mixed into the documents at deterministic places.
    train_all = train_docs + train_dlg
    random.Random(SEED + 1).shuffle(train_all)
    held_all = held_docs + held_dlg

    with open(os.path.join(args.out, "train.txt"), "w") as f:
        f.write("\n\n".join(train_all) + "\n")
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write("\n\n".join(held_docs) + "\n")   # plain prose: the perplexity text
    with open(os.path.join(args.out, "heldout_dialogues.txt"), "w") as f:
        f.write("\n\n".join(held_dlg) + "\n")

    # Tokenizer: trained on the first tokenizer-mb of the training documents (deterministic),
    # unless one is given.
    tok_dir = os.path.join(args.out, "tokenizer")
    if args.tokenizer:
        os.makedirs(tok_dir, exist_ok=True)   # a copy where the training scripts look for it
        for name in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"):
            if os.path.exists(os.path.join(args.tokenizer, name)):
                shutil.copyfile(os.path.join(args.tokenizer, name), os.path.join(tok_dir, name))
    else:
        train_tokenizer(args, tok_dir, train_docs, train_dlg)
    with open(os.path.join(tok_dir, "tokenizer_config.json")) as f:
        tc = json.load(f)
    specials = {v["content"]: int(k) for k, v in tc["added_tokens_decoder"].items()}
    eos = specials["[EOS]"]

    def ids_of(docs, name):
        seqs = tokenize(args.kimi, tok_dir, docs, args.out, name)
        flat = []
        for s in seqs:
            flat += s + [eos]
        return np.array(flat, dtype=np.int32)

    tr = ids_of(train_all, "train")
    he = ids_of(held_docs, "heldout")
    hd = ids_of(held_dlg, "heldout_dialogues")
    np.save(os.path.join(args.out, "train.ids.npy"), tr)
    np.save(os.path.join(args.out, "heldout.ids.npy"), he)
    np.save(os.path.join(args.out, "heldout_dialogues.ids.npy"), hd)
    meta = {"seed": SEED, "heldout_every": HELDOUT_EVERY, "ranks": args.ranks, "vocab_size": args.ranks + 256,
            "train_chars_by_source": counts, "train_docs": len(train_docs), "train_dialogues": len(train_dlg),
            "heldout_docs": len(held_docs), "heldout_dialogues": len(held_dlg),
            "train_tokens": int(tr.size), "heldout_tokens": int(he.size), "heldout_dialogue_tokens": int(hd.size),
            "eos_id": eos}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
