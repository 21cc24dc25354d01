#!/usr/bin/env node
// Token-for-token parity of `kimi tokenize` with js-tiktoken and with tiktoken (WASM build of the
// Rust core that tokenization_kimi.py runs), on one vocabulary trained by `kimi train-tokenizer`
// and the Kimi pattern, over a varied text set; plus piece-for-piece parity of the pre-tokeniser
// with tiktoken's own regex engine, round trips through `kimi detokenize`, and inputs that are not
// valid UTF-8. Exit status 0 = all identical, 1 = a difference (printed), 2 = setup failure.
//
// usage: node parity.js --kimi PATH/TO/kimi --work DIR [--repo DIR] [--corpus DIR]
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const K = require("./kimi_tokenizer_js.js");

function arg(name, fallback) {
  const i = process.argv.indexOf("--" + name);
  return i > 0 ? process.argv[i + 1] : fallback;
}
const kimi = arg("kimi");
const work = arg("work");
const repo = arg("repo", path.resolve(__dirname, "../.."));
const corpus = arg("corpus", "/usr/share/common-licenses");
if (!kimi || !work) {
  console.error("usage: node parity.js --kimi PATH --work DIR [--repo DIR] [--corpus DIR]");
  process.exit(2);
}
fs.mkdirSync(work, { recursive: true });
const { Tiktoken: JsTiktoken } = require("js-tiktoken/lite");
const { Tiktoken: WasmTiktoken } = require("tiktoken/lite");

// ---------------------------------------------------------------------------------------------
// The text set.

// Deterministic PRNG (mulberry32), so that every run checks the same strings.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HAND = [
  "Hello world", "Hello, World! How's it going? I'M FINE, THEY'RE HERE, we'll see, you'd, I've",
  "中文English混合", "你好世界", "你好。世界、「引用」『二重』（括弧）", "今日は良い天気ですね。東京タワーに行きましょう！",
  "ーカタカナ々〆〇ひらがなカタカナ漢字", "한국어 텍스트입니다. 안녕하세요!", "Привет, мир! Как дела? ЁЖИК ёжик",
  "Γειά σου Κόσμε· ΑΒΓ αβγ", "مرحبا بالعالم ١٢٣ ٤٥٦", "שלום עולם", "नमस्ते दुनिया, हिन्दी पाठ",
  "สวัสดีชาวโลก ภาษาไทย", "Ǆemal ǅemal ǆemal ʰʲʷ", "naïve café résumé Ångström Straße ß ẞ",
  "e\u0301e\u0308 a\u20dd x\u0301\u0302\u0303", "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇯🇵 ❤️ ✔︎ ☃",
  "Numbers: 1234567890 3.14159 -42 1,000,000 0x1F 1e-9 ²³ ½ Ⅻ ０１２３ ١٢٣",
  "    indented\n\ttabbed\r\n\r\nwindows\n\n\n   trailing   ",
  "a\u00a0b\u3000c\u2028d\u2029e\u0085f\u000bg\u000ch\u001ci\u180ej\u200bk\ufeffl",
  "it's IT'S it'ſ IT'ſ don'T 'll 'LL 'Re 've 'VE 'd 'D 'm 'M 't 's",
  "<|im_end|>", "[BOS]hello[EOS]", "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>ok<|im_end|>",
  "<|im_end", "<|im_end|", "[BOS", "<|reserved_token_", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"北京\"}<|tool_call_end|><|tool_calls_section_end|>",
  "x<|im_end|>y", "<|im_end|><|im_end|>", "<think>\nreasoning\n</think>\n\nanswer", "<<|im_end|>>", "<|media_begin|>image<|media_content|><|media_pad|><|media_end|>",
  "int main(int argc, char** argv) {\n  std::vector<int32_t> v{1, 2, 3};\n  for (auto& x : v) x *= 2;  // double\n  return v.size() > 2 ? 0 : 1;\n}\n",
  "def f(x: int) -> str:\n    \"\"\"Docstring.\"\"\"\n    return f'{x:>08.3f}'  # comment\n\n\nclass A(B):\n\tpass\n",
  "{\"key\": [1, 2.5, true, null], \"nested\": {\"ü\": \"\\u00fc\"}}", "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
  "$ ls -la | grep -E '^d' && echo \"done\" >> /tmp/log 2>&1", "SELECT * FROM t WHERE a <> 'b' AND c >= 10;",
  "https://example.com/path?q=1&r=two#frag user@example.com", "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
  "\u0378\ue000\uf8ff \u{10ffff}", "\r\r\n\n\r", " ", "\n", "\t", "a", "'", "'s", "''s", " 's", "ſ", "\u0301",
  // Characters newer than PCRE2 10.42's Unicode 14 (see NEWER below): CJK Ext-H and Ext-I, Nag
  // Mundari letters, sign and digits, Garay, Todhri, Tulu-Tigalari; and Unicode 17 ones, still
  // unassigned to tiktoken.
  "中\u{31350}文", "中\u{2EBF0}文 \u{31350}\u{31351}。", "ab\u{1E4D0}cd \u{1E4D0}\u{1E4EB}\u{1E4EC}\u{1E4D1} \u{1E4F0}\u{1E4F1}\u{1E4F2}\u{1E4F3}",
  "\u{10D50}\u{10D70}ab \u{10D40}\u{10D41}\u{10D42}\u{10D43} x\u{105C0}\u{11380}y", "ab\u{10940}cd 中\u{323B0}文 a\u{1E6C0}b",
];

// The characters of the text set assigned in Unicode 15 or later, with their version. Their
// classes come from kimi.cpp's tables (Unicode 16.0.0, as in tiktoken's Rust regex-syntax), from
// tiktoken's Rust regex (16.0.0) and from Node's ICU for js-tiktoken and the JS regex form
// (process.versions.unicode: 17.0 in Node 20.20). Where Node's version and 16.0 disagree on whether
// a character exists (the Unicode 17 ones with Node 20.20; 15/16 ones with an older Node), the JS
// engines classify it differently from tiktoken, whose behaviour is the one Kimi's tokenizer has
// (tokenization_kimi.py runs tiktoken): a text holding such a character is compared with tiktoken
// only.
const TIKTOKEN_UNICODE = 16.0;
const NODE_UNICODE = parseFloat(process.versions.unicode || "0");
const NEWER = new Map([
  [0x31350, 15.0], [0x31351, 15.0], [0x2ebf0, 15.1], [0x1e4d0, 15.0], [0x1e4d1, 15.0], [0x1e4eb, 15.0],
  [0x1e4ec, 15.0], [0x1e4f0, 15.0], [0x1e4f1, 15.0], [0x1e4f2, 15.0], [0x1e4f3, 15.0], [0x10d50, 16.0],
  [0x10d70, 16.0], [0x10d40, 16.0], [0x10d41, 16.0], [0x10d42, 16.0], [0x10d43, 16.0], [0x105c0, 16.0],
  [0x11380, 16.0], [0x10940, 17.0], [0x323b0, 17.0], [0x1e6c0, 17.0],
]);
function jsComparable(text) {
  for (const ch of text) {
    const v = NEWER.get(ch.codePointAt(0));
    if (v !== undefined && (v <= TIKTOKEN_UNICODE) !== (v <= NODE_UNICODE)) return false;
  }
  return true;
}

function codeSamples() {
  const files = ["CMakeLists.txt", "README.md", "src/tokenizer/bpe.cpp", "src/tokenizer/pretokenizer.cpp",
    "tests/tokenizer_parity/parity.js", "scripts/install-deps.sh"];
  const out = [];
  for (const f of files) {
    const p = path.join(repo, f);
    if (fs.existsSync(p)) out.push(fs.readFileSync(p, "utf8"));
  }
  return out;
}

function licenseParagraphs() {
  const out = [];
  for (const f of fs.readdirSync(corpus).sort()) {
    const p = path.join(corpus, f);
    if (!fs.lstatSync(p).isFile()) continue;
    const text = fs.readFileSync(p, "utf8");
    out.push(...text.split(/\n\s*\n/).filter((s) => s.length > 0).slice(0, 80));
  }
  return out;
}

// Atoms random strings are built from: every category the pattern distinguishes, and characters
// of Unicode 15, 16 and 17 (NEWER above).
const ATOMS = [
  "a", "b", "z", "A", "Z", "Hello", "WORLD", "mIxEd", "0", "7", "12", "3456", " ", "  ", "\t", "\n", "\r\n", "\r",
  ".", ",", "!", "?", "'", "\"", "-", "_", "(", ")", "{", "}", "<", ">", "/", "\\", "#", "@", "$", "%", "^", "&", "*",
  "'s", "'S", "'ſ", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "é", "ß", "Ä", "ǅ", "ʰ", "ª", "\u0301",
  "\u0308", "\u20dd", "\u0903", "Ω", "ω", "Ж", "ж", "中", "文", "你好", "一", "〇", "々", "〆", "\u2e80", "\u3021",
  "\u{16ff0}", "\u{20000}", "。", "、", "「", "」", "ー", "・", "あ", "カ", "한", "ก", "\u0e31", "क", "\u093f", "ب",
  "١", "²", "Ⅻ", "０", "½", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u001c",
  "\u180e", "\u200b", "\u200d", "\ufeff", "\ufe0f", "😀", "👍🏽", "🇺🇸", "€", "©", "∑", "→", "\ue000", "\u0378",
  "<|im_end|>", "[BOS]", "<think>", "<|", "|>", "<|im_", "[EOS", "\u{1d400}", "\u{1d41a}",
  "\u{31350}", "\u{2ebf0}", "\u{1e4d0}", "\u{1e4eb}", "\u{1e4ec}", "\u{1e4f0}", "\u{10d50}", "\u{10d70}",
  "\u{10d40}", "\u{105c0}", "\u{11380}", "\u{10940}", "\u{323b0}", "\u{1e6c0}",
];

function randomStrings(count, seed, maxAtoms) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < count; i++) {
    const n = 1 + Math.floor(r() * maxAtoms);
    let s = "";
    for (let j = 0; j < n; j++) s += ATOMS[Math.floor(r() * ATOMS.length)];
    out.push(s);
  }
  return out;
}

// runChar: a letter that forms no two-letter token, so that js-tiktoken's quadratic merge loop
// stays fast on 25,000-letter runs.
function longTexts(licenses, runChar) {
  const x = runChar;
  const prose = licenses.join("\n\n");
  const big = prose.repeat(Math.ceil(900000 / prose.length)).slice(0, 900000);  // crosses 400,000
  const han = "你好，世界。这是一个很长的没有空格的中文句子".repeat(2000);  // 44,000 non-space chars
  const emoji = "😀a😃.".repeat(8000);  // astral characters: code points, not UTF-16 units, are counted
  return [
    big,
    x.repeat(25000), x.repeat(25001), (x + ".").repeat(30000),  // non-space runs at and past 25,000
    " \f".repeat(13000) + "end", "a" + " \f".repeat(20000),     // whitespace runs past 25,000
    han, emoji, "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(60),  // one 2,700-byte piece
    ("word ".repeat(5000) + "\u001c".repeat(30000) + "tail"),  // U+001C: space to Python, not to \s
    "<|im_end|>".repeat(3000) + x.repeat(26000) + "<|im_end|>",
  ];
}

// ---------------------------------------------------------------------------------------------

function run(args, input) {
  return execFileSync(kimi, args, { input, maxBuffer: 1 << 30 });
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function show(s) {
  const t = s.length > 160 ? s.slice(0, 160) + `... (${s.length} UTF-16 units)` : s;
  return JSON.stringify(t);
}

const t0 = Date.now();
const elapsed = () => `(${((Date.now() - t0) / 1000).toFixed(1)} s)`;

function main() {
  const licenses = licenseParagraphs();
  const hand = HAND.concat(codeSamples());
  const random = randomStrings(3000, 1234, 12);
  // A vocabulary trained on the licenses plus this text set, so that its merges reach into every
  // script here and a piece boundary in the wrong place changes the ids.
  const corpusFile = path.join(work, "parity-corpus.txt");
  fs.writeFileSync(corpusFile, hand.concat(random).join("\n") + "\n");
  const modelDir = path.join(work, "model");
  run(["train-tokenizer", modelDir, corpus, corpusFile, "--ranks", "4096"]);
  const vocab = K.loadVocab(modelDir);
  const runChar = [..."xqzjkvwy"].find((c) => !vocab.rankOf.has(c + c)) || "x";
  const cases = hand.concat(licenses, random, randomStrings(300, 99, 200), longTexts(licenses, runChar));

  const js = new JsTiktoken({ pat_str: K.KIMI_PATTERN_JS, special_tokens: vocab.specials,
    bpe_ranks: "! 0 " + vocab.b64.join(" ") });
  const wasm = new WasmTiktoken(vocab.tiktokenText, vocab.specials, K.KIMI_PATTERN_ORIGINAL);
  const jsEncode = (t) => K.kimiSlices(t).flatMap((s) => js.encode(s, "all"));
  const wasmEncode = (t) => K.kimiSlices(t).flatMap((s) => Array.from(wasm.encode(s, "all")));

  // Ours: all cases in one process.
  const casesFile = path.join(work, "cases.jsonl");
  fs.writeFileSync(casesFile, cases.map((c) => JSON.stringify(c)).join("\n") + "\n");
  const ours = run(["tokenize", "--model", modelDir, "--file", casesFile, "--jsonl"]).toString().trim().split("\n").map(JSON.parse);
  if (ours.length !== cases.length) throw new Error(`kimi tokenize gave ${ours.length} lines for ${cases.length} cases`);

  let failures = 0, bytes = 0, tokens = 0, tiktokenOnly = 0;
  const fail = (msg) => {
    if (++failures <= 10) console.error("MISMATCH " + msg);
  };
  for (let i = 0; i < cases.length; i++) {
    bytes += Buffer.byteLength(cases[i]);
    tokens += ours[i].length;
    const w = wasmEncode(cases[i]);
    const refs = [["tiktoken", w]];
    if (jsComparable(cases[i])) refs.push(["js-tiktoken", jsEncode(cases[i])]);
    else ++tiktokenOnly;
    for (const [name, ref] of refs) {
      const d = firstDiff(ours[i], ref);
      if (d >= 0)
        fail(`case ${i} ${show(cases[i])}: ours vs ${name} differ at token ${d}: ` +
          `${JSON.stringify(ours[i].slice(d, d + 8))} vs ${JSON.stringify(ref.slice(d, d + 8))}`);
    }
  }
  console.log(`ids: ${cases.length} texts, ${(bytes / 1e6).toFixed(2)} MB, ${tokens} tokens: ` +
    (failures ? `${failures} differences` : "kimi == js-tiktoken == tiktoken on every token") +
    ` (${tiktokenOnly} texts with characters Node's Unicode ${NODE_UNICODE} and tiktoken's ${TIKTOKEN_UNICODE} disagree on: tiktoken only)` +
    " " + elapsed());

  // Pieces: ours against tiktoken's Rust regex engine itself. A throw-away vocabulary holding
  // every substring of the text makes BPE merge each piece into exactly one token, so the
  // tokens tiktoken returns are its pieces.
  const short = hand.concat(random).filter((c) => Buffer.byteLength(c) <= 64);
  const piecesFile = path.join(work, "pieces.jsonl");
  fs.writeFileSync(piecesFile, short.map((c) => JSON.stringify(c)).join("\n") + "\n");
  const ourPieces = run(["tokenize", "--model", modelDir, "--file", piecesFile, "--jsonl", "--pieces"]).toString().trim().split("\n").map(JSON.parse);
  const jsRe = new RegExp(K.KIMI_PATTERN_JS, "ug");
  const specialRe = new RegExp(Object.keys(vocab.specials).map((s) => s.replace(/[\\^$*+?.()|[\]{}]/g, "\\$&")).join("|"), "g");
  let pieceFailures = 0;
  const BATCH = 50;
  for (let b0 = 0; b0 < short.length; b0 += BATCH) {
    const batch = short.slice(b0, b0 + BATCH);
    const subs = new Map();
    for (let b = 0; b < 256; b++) subs.set(Buffer.from([b]).toString("base64"), subs.size);
    for (const c of batch) {
      const buf = Buffer.from(c);
      for (let len = 2; len <= buf.length; len++)
        for (let s = 0; s + len <= buf.length; s++) {
          const k = buf.subarray(s, s + len).toString("base64");
          if (!subs.has(k)) subs.set(k, subs.size);
        }
    }
    // Ranks grow with length (the loops above add shorter substrings first), so merges go on
    // until each piece is a single token.
    let text = "";
    for (const [k, v] of subs) text += k + " " + v + "\n";
    const specials = {};
    let next = subs.size;
    for (const name of Object.keys(vocab.specials)) specials[name] = next++;
    const probe = new WasmTiktoken(text, specials, K.KIMI_PATTERN_ORIGINAL);
    for (let i = b0; i < b0 + batch.length; i++) {
      const rust = Array.from(probe.encode(short[i], "all")).map((id) => Buffer.from(probe.decode_single_token_bytes(id)).toString());
      const jsPieces = [];
      let start = 0;
      for (const m of short[i].matchAll(specialRe)) {
        jsPieces.push(...[...short[i].slice(start, m.index).matchAll(jsRe)].map((x) => x[0]), m[0]);
        start = m.index + m[0].length;
      }
      jsPieces.push(...[...short[i].slice(start).matchAll(jsRe)].map((x) => x[0]));
      const refs = [["tiktoken regex", rust]];
      if (jsComparable(short[i])) refs.push(["JS regex", jsPieces]);
      for (const [name, ref] of refs) {
        if (JSON.stringify(ref) !== JSON.stringify(ourPieces[i])) {
          ++pieceFailures;
          fail(`pieces of ${show(short[i])}: ours ${JSON.stringify(ourPieces[i])} vs ${name} ${JSON.stringify(ref)}`);
        }
      }
    }
    probe.free();
  }
  console.log(`pieces: ${short.length} short texts: ` +
    (pieceFailures ? `${pieceFailures} differences` : "kimi == tiktoken's regex engine == JS regex form on every piece") + " " + elapsed());

  // Round trip through our decoder.
  const idsFile = path.join(work, "ids.jsonl");
  fs.writeFileSync(idsFile, ours.map((ids) => JSON.stringify(ids)).join("\n") + "\n");
  const decoded = run(["detokenize", "--model", modelDir, "--ids-file", idsFile, "--jsonl"]).toString().trim().split("\n").map(JSON.parse);
  let rtFailures = 0;
  for (let i = 0; i < cases.length; i++)
    if (decoded[i] !== cases[i]) {
      ++rtFailures;
      fail(`round trip of case ${i} ${show(cases[i])} gave ${show(decoded[i] ?? "")}`);
    }
  console.log(`round trip: ${rtFailures ? rtFailures + " failures" : "decode(encode(x)) == x for all " + cases.length}` + " " + elapsed());

  // Bytes that are not UTF-8: each valid stretch must encode as js-tiktoken encodes it on its own,
  // each invalid run as byte-level BPE of its bytes; and the bytes must come back exactly.
  const r = rng(7);
  const raws = [
    Buffer.from([0xff]), Buffer.from([0xe4, 0xb8]), Buffer.from("ab\xffcd", "latin1"),
    Buffer.concat([Buffer.from("Hello "), Buffer.from([0xe4, 0xb8]), Buffer.from(" world")]),
    Buffer.concat([Buffer.from("你好"), Buffer.from([0x80, 0x80, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80]), Buffer.from("世界  ")]),
    Buffer.concat([Buffer.from("x  "), Buffer.from([0xfe]), Buffer.from("  <|im_end|>"), Buffer.from([0xf0, 0x9f, 0x98]), Buffer.from("'s")]),
  ];
  for (let i = 0; i < 120; i++) {
    const parts = [];
    const n = 1 + Math.floor(r() * 10);
    for (let j = 0; j < n; j++) {
      if (r() < 0.4) parts.push(Buffer.from(Array.from({ length: 1 + Math.floor(r() * 4) }, () => Math.floor(r() * 256))));
      else parts.push(Buffer.from(ATOMS[Math.floor(r() * ATOMS.length)]));
    }
    raws.push(Buffer.concat(parts));
  }
  let rawFailures = 0;
  for (let i = 0; i < raws.length; i++) {
    const f = path.join(work, "raw.bin");
    fs.writeFileSync(f, raws[i]);
    const got = JSON.parse(run(["tokenize", "--model", modelDir, "--file", f, "--json"]).toString());
    const encodeValid = (str) => (jsComparable(str) ? js.encode(str, "all") : Array.from(wasm.encode(str, "all")));
    const want = K.utf8Segments(raws[i]).flatMap((s) => (s.valid ? encodeValid(s.bytes.toString()) : K.bpeBytes(s.bytes, vocab)));
    const d = firstDiff(got, want);
    if (d >= 0) {
      ++rawFailures;
      fail(`invalid UTF-8 case ${raws[i].toString("hex")}: ours ${JSON.stringify(got)} vs expected ${JSON.stringify(want)}`);
    }
    fs.writeFileSync(path.join(work, "raw.ids"), got.join(","));
    const back = run(["detokenize", "--model", modelDir, "--ids-file", path.join(work, "raw.ids")]);
    if (!back.equals(raws[i])) {
      ++rawFailures;
      fail(`invalid UTF-8 round trip of ${raws[i].toString("hex")} gave ${back.toString("hex")}`);
    }
  }
  console.log(`invalid UTF-8: ${raws.length} byte strings: ` +
    (rawFailures ? `${rawFailures} differences` : "valid stretches as js-tiktoken (tiktoken where they disagree), invalid runs as byte BPE, bytes round-trip") + " " + elapsed());
  wasm.free();
  process.exit(failures ? 1 : 0);
}

try {
  main();
} catch (e) {
  console.error(e.stack || String(e));
  process.exit(2);
}
