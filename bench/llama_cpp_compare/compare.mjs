// kimi.cpp against llama.cpp on the same model and the same token ids: prefill and decode speed
// at the same thread count, and greedy-token agreement. llama.cpp is the prebuilt CPU build that
// node-llama-cpp ships (never built or downloaded here); kimi.cpp runs `kimi generate --json`.
//
// usage: node compare.mjs --kimi BIN --model DIR --gguf FILE [--gguf-f32 FILE] [--threads N]
//                         [--prompts K] [--prompt-len P] [--gen G] [--seed S] [--check] [--label TEXT]
//                         [--kimi-dtype auto|float32|bfloat16]
//
// --model is the checkpoint directory kimi loads, --gguf its `kimi export-gguf` conversion.
// Prompts are K pseudo-random sequences of P ids from the base (non-special) vocabulary, fed as
// raw ids (no BOS, no chat template); each engine then generates G tokens greedily, ignoring
// EOS. Both engines warm up on the first prompt (untimed) so that the mapped weights are
// resident. Prefill = the prompt's forward pass and the first token; decode = the G-1 steps after.
// --gguf-f32: the same weights exported with `--outtype f32`; an extra, untimed llama.cpp pass on
// it gives the exact agreement (llama.cpp's BF16 matmul rounds activations to BF16, and random
// weights leave close logits and close MoE routing scores, so BF16 tokens may diverge).
// --check: exit 1 unless every generated token agrees in the exact comparison (--gguf-f32 when
// given, else --gguf); it fetches llama.cpp's logits so that a divergence reports the margin.
// --kimi-dtype: kimi's --dtype (default float32, whose tokens the exact comparison can hold to;
// bfloat16: its BF16 linears round activations to bf16 too, the precision llama.cpp's BF16 matmul
// computes at; auto: what kimi serve runs, bfloat16 for a BF16 checkpoint on AVX512_BF16 CPUs).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function parseArgs(argv) {
  const o = { threads: 2, prompts: 3, "prompt-len": 32, gen: 16, seed: 1, check: false, label: "", "kimi-dtype": "float32" };
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i].replace(/^--/, "");
    if (k === "check") o.check = true;
    else if (k in o || ["kimi", "model", "gguf", "gguf-f32"].includes(k)) o[k] = argv[++i];
    else throw new Error(`unknown option ${argv[i]}`);
  }
  for (const k of ["kimi", "model", "gguf"]) if (!o[k]) throw new Error(`--${k} is required`);
  for (const k of ["threads", "prompts", "prompt-len", "gen", "seed"]) o[k] = Number(o[k]);
  return o;
}

// Base-vocabulary size: tiktoken.model holds one line per base token.
function baseVocabSize(modelDir) {
  const text = fs.readFileSync(path.join(modelDir, "tiktoken.model"), "utf8");
  return text.split("\n").filter((l) => l.trim() !== "").length;
}

function makePrompts(count, len, nBase, seed) {
  let s = BigInt(seed) * 0x9e3779b97f4a7c15n + 1n;
  const next = () => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number(s >> 33n);
  };
  return Array.from({ length: count }, () => Array.from({ length: len }, () => next() % nBase));
}

function runKimi(o, prompt) {
  const args = ["generate", "--model", o.model, "--prompt-ids", prompt.join(","), "--max-tokens", String(o.gen),
                "--ignore-eos", "--temperature", "0", "--threads", String(o.threads), "--warmup", "--json"];
  if (o["kimi-dtype"]) args.push("--dtype", o["kimi-dtype"]);
  const out = execFileSync(o.kimi, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const j = JSON.parse(out.trim().split("\n").pop());
  return { tokens: j.tokens, prefill: j.prefill_seconds, decode: j.decode_seconds, threads: j.threads };
}

async function openLlama(llama, gguf, o, performanceTracking = false) {
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const context = await model.createContext({
    performanceTracking,
    contextSize: o["prompt-len"] + o.gen + 8, batchSize: o["prompt-len"], sequences: 1,
    threads: { ideal: o.threads, min: o.threads },
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  return { model, context, seq: context.getSequence() };
}

async function closeLlama(l) {
  await l.context.dispose();
  await l.model.dispose();
}

// One greedy generation; with withLogits, llama.cpp's top-2 logits and kimi's token's logit at each step.
async function runLlama(seq, prompt, gen, kimiTokens, withLogits) {
  const next = (i) => {
    const g = { token: true, options: { temperature: 0 } };
    if (withLogits) g.logits = { filter: { tokens: i < kimiTokens.length ? [kimiTokens[i]] : [],
                                           includeTop: 2, includeSelected: true } };
    return g;
  };
  await seq.clearHistory();
  const tokens = [], logits = [];
  const t0 = performance.now();
  const items = prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: next(0) }] : t));
  let res = await seq.controlledEvaluate(items);
  let out = res[res.length - 1].next;
  tokens.push(out.token);
  logits.push(out.logits);
  const t1 = performance.now();
  while (tokens.length < gen) {
    res = await seq.controlledEvaluate([[tokens[tokens.length - 1], { generateNext: next(tokens.length) }]]);
    out = res[0].next;
    tokens.push(out.token);
    logits.push(out.logits);
  }
  const t2 = performance.now();
  return { tokens, logits, prefill: (t1 - t0) / 1e3, decode: (t2 - t1) / 1e3 };
}

// Greedy agreement of kimi's runs with llama.cpp's: the matching prefix of each prompt's tokens,
// and at the first divergence llama.cpp's logits when it fetched them.
function agreement(kimiRuns, llamaRuns, gen) {
  let agree = 0, total = 0, ok = true;
  const lines = [];
  kimiRuns.forEach((kr, pi) => {
    const lr = llamaRuns[pi];
    let first = -1;
    for (let i = 0; i < Math.max(kr.tokens.length, lr.tokens.length); ++i)
      if (kr.tokens[i] !== lr.tokens[i]) { first = i; break; }
    const matched = first < 0 ? kr.tokens.length : first;
    agree += matched; total += gen;
    if (first < 0) {
      lines.push(`  prompt ${pi}: ${matched}/${gen} identical`);
      return;
    }
    ok = false;
    let detail = "";
    const lg = lr.logits[first];
    if (lg) {
      const top = [...lg.entries()].sort((a, b) => b[1] - a[1]);
      const kl = lg.get(kr.tokens[first]);
      detail = `; llama.cpp's logits there: top ${top[0][0]}=${top[0][1].toFixed(6)}` +
               (top.length > 1 ? `, 2nd ${top[1][0]}=${top[1][1].toFixed(6)} ` +
                                 `(margin ${(top[0][1] - top[1][1]).toExponential(2)})` : "") +
               (kl !== undefined ? `, kimi's ${kr.tokens[first]}=${kl.toFixed(6)}` : "");
    }
    lines.push(`  prompt ${pi}: ${matched}/${gen} agree; first divergence at generated token ${first}: ` +
               `kimi ${kr.tokens[first]}, llama.cpp ${lr.tokens[first]}${detail}`);
    lines.push(`    kimi:      ${kr.tokens.join(",")}`);
    lines.push(`    llama.cpp: ${lr.tokens.join(",")}`);
  });
  return { agree, total, ok, lines };
}

function fmtRate(n, s) { return s > 0 ? (n / s).toFixed(1) : "-"; }

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const nBase = baseVocabSize(o.model);
  const prompts = makePrompts(o.prompts, o["prompt-len"], nBase, o.seed);

  // llama.cpp's own timing counters (llama_perf_context_print) come through the logger.
  const perfLines = [];
  const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    logLevel: LlamaLogLevel.info, maxThreads: o.threads,
    logger: (level, msg) => {
      if (msg.includes("llama_perf_context_print")) perfLines.push(msg);
      else if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) console.error(msg);
    },
  });
  const rel = llama.llamaCppRelease;
  const nlcVersion = JSON.parse(fs.readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url))).version;
  console.log(`model: ${o.model}${o.label ? ` (${o.label})` : ""}`);
  console.log(`llama.cpp: ${o.gguf} through node-llama-cpp ${nlcVersion} (${rel.repo} ${rel.release}, ` +
              `${llama.buildType === "prebuilt" ? "prebuilt" : llama.buildType} CPU binaries), ` +
              `KV cache F32, flash attention off`);
  console.log(`threads: ${o.threads} each; ${o.prompts} prompts x ${o["prompt-len"]} ids, ${o.gen} greedy tokens each ` +
              `(raw ids from the first ${nBase} base tokens, no BOS or template, EOS ignored)`);

  // The timed comparison. Both engines warm up on the first prompt (llama.cpp in a context of its
  // own, so that the timed context's counters hold only the timed runs).
  const warm = await openLlama(llama, o.gguf, o);
  await warm.seq.evaluateWithoutGeneratingNewTokens(prompts[0]);
  await closeLlama(warm);
  const main = await openLlama(llama, o.gguf, o, true);
  const kimiRuns = [], llamaRuns = [];
  const k = { p: 0, d: 0, pn: 0, dn: 0 }, l = { p: 0, d: 0, pn: 0, dn: 0 };
  for (const prompt of prompts) {
    const kr = runKimi(o, prompt);
    if (kr.threads !== o.threads) throw new Error(`kimi ran with ${kr.threads} threads, asked for ${o.threads}`);
    const lr = await runLlama(main.seq, prompt, o.gen, kr.tokens, o.check && !o["gguf-f32"]);
    for (const [acc, r] of [[k, kr], [l, lr]]) {
      acc.p += r.prefill; acc.pn += prompt.length;
      acc.d += r.decode; acc.dn += r.tokens.length - 1;
    }
    kimiRuns.push(kr);
    llamaRuns.push(lr);
  }
  await main.context.printTimings();
  await new Promise((resolve) => setTimeout(resolve, 50));  // the log callback is asynchronous
  await closeLlama(main);
  const perf = (re) => {
    const m = perfLines.map((x) => x.match(re)).find((x) => x);
    return m ? { ms: Number(m[1]), n: Number(m[2]) } : null;
  };
  const lpp = perf(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/);
  const lpd = perf(/\s eval time =\s*([\d.]+) ms \/\s*(\d+) runs/);

  const kp = k.pn / k.p, lp = l.pn / l.p, kd = k.dn / k.d, ld = l.dn / l.d;
  const w = (s, n) => String(s).padStart(n);
  console.log("");
  console.log(`${"".padEnd(18)}${w("prefill tok/s", 14)}${w("decode tok/s", 14)}`);
  console.log(`${(o["kimi-dtype"] ? `kimi.cpp ${o["kimi-dtype"]}` : "kimi.cpp").padEnd(18)}${w(fmtRate(k.pn, k.p), 14)}${w(fmtRate(k.dn, k.d), 14)}`);
  console.log(`${"llama.cpp".padEnd(18)}${w(fmtRate(l.pn, l.p), 14)}${w(fmtRate(l.dn, l.d), 14)}`);
  console.log(`${"kimi / llama.cpp".padEnd(18)}${w((kp / lp).toFixed(2) + "x", 14)}${w((kd / ld).toFixed(2) + "x", 14)}`);
  if (lpp && lpd) {
    // The same runs by llama.cpp's own counters: its compute without node-llama-cpp's per-call work.
    const cp = lpp.n / (lpp.ms / 1e3), cd = lpd.n / (lpd.ms / 1e3);
    console.log(`${"llama.cpp, own".padEnd(18)}${w(cp.toFixed(1), 14)}${w(cd.toFixed(1), 14)}` +
                `   (llama_perf counters: ${lpp.n} prompt tokens, ${lpd.n} decode steps)`);
    console.log(`${"kimi / that".padEnd(18)}${w((kp / cp).toFixed(2) + "x", 14)}${w((kd / cd).toFixed(2) + "x", 14)}`);
  }
  console.log("");
  let a = agreement(kimiRuns, llamaRuns, o.gen);
  console.log(`greedy agreement with ${path.basename(o.gguf)}: ${a.agree}/${a.total} generated tokens match ` +
              `(prefix up to the first divergence)`);
  for (const s of a.lines) console.log(s);

  // Untimed: the same weights widened to F32, so that llama.cpp computes without rounding its
  // activations to BF16; this is the exact comparison.
  if (o["gguf-f32"]) {
    const exact = await openLlama(llama, o["gguf-f32"], o);
    const runs = [];
    for (let pi = 0; pi < prompts.length; ++pi)
      runs.push(await runLlama(exact.seq, prompts[pi], o.gen, kimiRuns[pi].tokens, true));
    await closeLlama(exact);
    a = agreement(kimiRuns, runs, o.gen);
    console.log(`greedy agreement with ${path.basename(o["gguf-f32"])} (the same weights as F32, llama.cpp computing ` +
                `in F32): ${a.agree}/${a.total} generated tokens match`);
    for (const s of a.lines) console.log(s);
  }
  const allOk = a.ok;
  await llama.dispose();
  if (o.check && !allOk) {
    console.log("FAIL: kimi.cpp and llama.cpp disagree on greedy tokens");
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(2);
});
