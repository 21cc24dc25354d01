#!/usr/bin/env node
// Encoding speed of the npm tiktoken package (WASM build of OpenAI's Rust tiktoken) and of
// js-tiktoken (pure JS) with kimi.cpp's vocabulary and the Kimi pattern, to compare with
// `kimi tokenize --stats` on the same text in the same run (bench/tokenizer_bench.sh).
// Also checks that tiktoken's ids equal the ids kimi wrote. Prints one JSON line.
// usage: node tokenizer_bench.js MODEL_DIR TEXT_FILE KIMI_IDS_FILE [REPEATS]
"use strict";
const fs = require("fs");
const path = require("path");
const K = require(path.join(__dirname, "../tests/tokenizer_parity/kimi_tokenizer_js.js"));
const { Tiktoken: WasmTiktoken } = require("tiktoken/lite");
const { Tiktoken: JsTiktoken } = require("js-tiktoken/lite");

const [modelDir, textFile, idsFile, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg || 3);
const vocab = K.loadVocab(modelDir);
const text = fs.readFileSync(textFile, "utf8");
const bytes = Buffer.byteLength(text);

// Best of n, in CPU seconds of this process (the machine may be busy; kimi reports the same).
function best(fn, n) {
  let bestS = Infinity, out;
  for (let i = 0; i < n; i++) {
    const t0 = process.cpuUsage();
    out = fn();
    const d = process.cpuUsage(t0);
    bestS = Math.min(bestS, (d.user + d.system) / 1e6);
  }
  return { s: bestS, out };
}

const wasm = new WasmTiktoken(vocab.tiktokenText, vocab.specials, K.KIMI_PATTERN_ORIGINAL);
// The Kimi slicing is part of the measured work, as it is of kimi's encode.
const w = best(() => {
  let n = 0;
  const parts = [];
  for (const s of K.kimiSlices(text)) {
    const ids = wasm.encode(s, "all");
    parts.push(ids);
    n += ids.length;
  }
  return parts;
}, repeats);
const wasmIds = w.out.flatMap((a) => Array.from(a));

const js = new JsTiktoken({ pat_str: K.KIMI_PATTERN_JS, special_tokens: vocab.specials, bpe_ranks: "! 0 " + vocab.b64.join(" ") });
const j = best(() => K.kimiSlices(text).reduce((n, s) => n + js.encode(s, "all").length, 0), 1);

const kimiIds = fs.readFileSync(idsFile, "utf8").trim().split(",").map(Number);
const same = kimiIds.length === wasmIds.length && kimiIds.every((x, i) => x === wasmIds[i]);
console.log(JSON.stringify({
  bytes, tokens: wasmIds.length, ids_equal: same,
  tiktoken_wasm_mb_s: bytes / w.s / 1e6, js_tiktoken_mb_s: bytes / j.s / 1e6,
}));
wasm.free();
process.exit(same ? 0 : 1);
