// The Kimi tokenizer rebuilt in JavaScript on top of two independent tiktoken implementations, the
// yardstick for kimi.cpp's C++ tokenizer (see parity.js and ../../bench/tokenizer_bench.sh):
//  - js-tiktoken: pure JS, its regex is a JS RegExp (flags "ug"), so it gets KIMI_PATTERN_JS;
//  - tiktoken (npm, WASM build of OpenAI's Rust core): the regex engine tokenization_kimi.py itself
//    runs, so it gets the pattern exactly as published (KIMI_PATTERN_ORIGINAL, with && intersections).
// What tokenization_kimi.py adds around tiktoken (400,000-character chunks, 25,000-character
// whitespace/non-whitespace runs) is re-implemented here from its description.
"use strict";
const fs = require("fs");
const path = require("path");

const CONTRACTIONS = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)?`;
const UPPER = String.raw`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]`;
const LOWER = String.raw`[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]`;
const KIMI_PATTERN_ORIGINAL = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPER}*${LOWER}+${CONTRACTIONS}`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPER}+${LOWER}*${CONTRACTIONS}`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

// JS form (u flag, no &&, no inline (?i:)): \p{Han} is the Script property in Rust, JS \s is not
// Unicode White_Space (it has U+FEFF, lacks U+0085), and the case-insensitive contractions are
// spelt out with every character that case-folds to their letters (U+017F folds to s).
const HAN_JS = String.raw`\p{Script=Han}`;
const UPPER_JS = String.raw`(?:(?!${HAN_JS})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])`;
const LOWER_JS = String.raw`(?:(?!${HAN_JS})[\p{Ll}\p{Lm}\p{Lo}\p{M}])`;
const CONTRACTIONS_JS = String.raw`(?:'[sS\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?`;
const WS = String.raw`\p{White_Space}`, NWS = String.raw`\P{White_Space}`;
const KIMI_PATTERN_JS = [
  String.raw`${HAN_JS}+`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPER_JS}*${LOWER_JS}+${CONTRACTIONS_JS}`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPER_JS}+${LOWER_JS}*${CONTRACTIONS_JS}`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^${WS}\p{L}\p{N}]+[\r\n]*`,
  String.raw`${WS}*[\r\n]+`,
  String.raw`${WS}+(?!${NWS})`,
  String.raw`${WS}+`,
].join("|");

const MAX_ENCODE_CHARS = 400000;
const MAX_RUN_CHARS = 25000;

// Python's str.isspace.
function pyIsSpace(cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp === 0x85 || cp === 0xa0 ||
    cp === 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp === 0x2028 || cp === 0x2029 || cp === 0x202f ||
    cp === 0x205f || cp === 0x3000;
}

// tokenization_kimi.py's slicing: 400,000-character chunks (characters = code points), each cut
// so that no run of whitespace or of non-whitespace exceeds 25,000 characters.
function kimiSlices(text) {
  const cps = Array.from(text);
  const out = [];
  for (let c = 0; c < cps.length || (c === 0 && out.length === 0); c += MAX_ENCODE_CHARS) {
    const chunk = cps.slice(c, c + MAX_ENCODE_CHARS);
    let runLen = 0, runSpace = chunk.length ? pyIsSpace(chunk[0].codePointAt(0)) : false, start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const sp = pyIsSpace(chunk[i].codePointAt(0));
      if (runSpace !== sp) {
        runLen = 1;
        runSpace = sp;
      } else if (++runLen > MAX_RUN_CHARS) {
        out.push(chunk.slice(start, i).join(""));
        start = i;
        runLen = 1;
      }
    }
    out.push(chunk.slice(start).join(""));
    if (cps.length === 0) break;
  }
  return out;
}

// tiktoken.model + tokenizer_config.json of a model directory.
function loadVocab(modelDir) {
  const lines = fs.readFileSync(path.join(modelDir, "tiktoken.model"), "utf8").split("\n").filter(Boolean);
  const b64 = new Array(lines.length);
  for (const line of lines) {
    const [tok, rank] = line.split(" ");
    b64[Number(rank)] = tok;
  }
  const n = b64.length;
  const cfgPath = path.join(modelDir, "tokenizer_config.json");
  const added = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")).added_tokens_decoder || {} : {};
  const specials = {};
  for (let id = n; id < n + 256; id++) specials[added[id] ? added[id].content : `<|reserved_token_${id}|>`] = id;
  const bytes = b64.map((t) => Buffer.from(t, "base64"));
  const rankOf = new Map(bytes.map((b, r) => [b.toString("latin1"), r]));
  return { n, b64, bytes, rankOf, specials, tiktokenText: lines.join("\n") + "\n" };
}

// Byte-level BPE by ranks (tiktoken's rule: lowest-rank adjacent pair first, leftmost on ties),
// used for the invalid-UTF-8 runs that neither JS library can take.
function bpeBytes(buf, vocab) {
  const key = (a, b) => buf.subarray(a, b).toString("latin1");
  let bounds = Array.from({ length: buf.length + 1 }, (_, i) => i);
  for (;;) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 2 < bounds.length; i++) {
      const r = vocab.rankOf.get(key(bounds[i], bounds[i + 2]));
      if (r !== undefined && r < bestRank) (bestRank = r), (best = i);
    }
    if (best < 0) break;
    bounds.splice(best + 1, 1);
  }
  const ids = [];
  for (let i = 0; i + 1 < bounds.length; i++) ids.push(vocab.rankOf.get(key(bounds[i], bounds[i + 1])));
  return ids;
}

// Cuts bytes into maximal valid UTF-8 stretches and runs of invalid bytes (Unicode table 3-7).
function utf8Segments(buf) {
  const seqLen = (i) => {
    const b0 = buf[i];
    if (b0 < 0x80) return 1;
    let need, lo = 0x80, hi = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) need = 1;
    else if (b0 >= 0xe0 && b0 <= 0xef) (need = 2), b0 === 0xe0 && (lo = 0xa0), b0 === 0xed && (hi = 0x9f);
    else if (b0 >= 0xf0 && b0 <= 0xf4) (need = 3), b0 === 0xf0 && (lo = 0x90), b0 === 0xf4 && (hi = 0x8f);
    else return -1;
    for (let k = 1; k <= need; k++) {
      if (i + k >= buf.length || buf[i + k] < lo || buf[i + k] > hi) return -k;  // invalid subpart of k bytes
      lo = 0x80, hi = 0xbf;
    }
    return need + 1;
  };
  const segs = [];
  let i = 0;
  while (i < buf.length) {
    const start = i;
    let valid = seqLen(i) > 0;
    while (i < buf.length) {
      const l = seqLen(i);
      if ((l > 0) !== valid) break;
      i += Math.abs(l);
    }
    segs.push({ valid, bytes: buf.subarray(start, i) });
  }
  return segs;
}

module.exports = {
  KIMI_PATTERN_ORIGINAL, KIMI_PATTERN_JS, MAX_ENCODE_CHARS, MAX_RUN_CHARS, pyIsSpace, kimiSlices, loadVocab,
  bpeBytes, utf8Segments,
};
