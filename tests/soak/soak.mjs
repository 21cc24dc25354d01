// Soak test of `kimi serve` (node built-ins only): waves of concurrent streaming and
// non-streaming completions and chats, some of whose clients hang up at a random moment; then
// the server must be idle (no running or waiting request, no KV block in use beyond the prefix
// cache); then a last wave with a SIGTERM in the middle: the requests in flight finish, new ones
// get 503 (or find the port closed), and the server exits 0.
// Every client must get a complete answer or a clear error (an OpenAI error object), except
// those that hung up themselves. Bounded: a fixed number of requests, each with a deadline.
// Usage: node soak.mjs BASE_URL SERVER_PID WAVES PER_WAVE SEED
import http from "node:http";

const [base, pidArg, wavesArg, perWaveArg, seedArg] = process.argv.slice(2);
const serverPid = Number(pidArg);
const waves = Number(wavesArg), perWave = Number(perWaveArg);
let seed = Number(seedArg) >>> 0;
const rand = () => {  // xorshift32: the same run for the same seed
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const url = new URL(base);
const failures = [];
const fail = (what) => { failures.push(what); console.error("FAIL: " + what); };

function request(path, body, { disconnectAfterMs = -1, deadlineMs = 60000 } = {}) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    let settled = false;
    const done = (r) => { if (!settled) { settled = true; clearTimeout(deadline); resolve(r); } };
    const req = http.request({ host: url.hostname, port: url.port, path, method: "POST",
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { text += c; });
      res.on("end", () => done({ kind: "response", status: res.statusCode, text }));
      res.on("error", (e) => done({ kind: "error", error: String(e), status: res.statusCode, text }));
    });
    req.on("error", (e) => done({ kind: settled ? "ignored" : "error", error: String(e) }));
    const deadline = setTimeout(() => { req.destroy(); done({ kind: "timeout" }); }, deadlineMs);
    if (disconnectAfterMs >= 0) setTimeout(() => { req.destroy(); done({ kind: "hung-up" }); }, disconnectAfterMs);
    req.end(data);
  });
}

// A complete answer, or a clear error, judged from the HTTP exchange.
function judge(label, r, stream) {
  if (r.kind === "hung-up") return "hung-up";
  if (r.kind !== "response") { fail(`${label}: ${r.kind} ${r.error || ""}`); return "bad"; }
  if (r.status !== 200) {
    try {
      const e = JSON.parse(r.text);
      if (e.error && typeof e.error.message === "string" && e.error.message.length > 0) return "error";
    } catch {}
    fail(`${label}: status ${r.status} without an error object: ${r.text.slice(0, 200)}`);
    return "bad";
  }
  if (!stream) {
    try {
      const j = JSON.parse(r.text);
      if (j.choices && j.choices.length && j.choices.every((c) => c.finish_reason)) return "complete";
    } catch {}
    fail(`${label}: incomplete body: ${r.text.slice(0, 200)}`);
    return "bad";
  }
  const events = r.text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  if (events[events.length - 1] !== "[DONE]") { fail(`${label}: stream without [DONE]`); return "bad"; }
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  if (chunks.some((c) => c.error)) return "error";
  if (!chunks.some((c) => c.choices && c.choices.some((ch) => ch.finish_reason))) {
    fail(`${label}: stream without a finish_reason`); return "bad";
  }
  return "complete";
}

function randomRequest(i) {
  const stream = rand() < 0.5, chat = rand() < 0.5;
  const max_tokens = 1 + Math.floor(rand() * 48);
  const words = Array.from({ length: 1 + Math.floor(rand() * 40) }, () => "w" + Math.floor(rand() * 500)).join(" ");
  const body = chat
    ? { model: "soak", messages: [{ role: "user", content: words }], max_tokens, stream, temperature: rand() }
    : { model: "soak", prompt: words, max_tokens, stream, temperature: 0 };
  if (rand() < 0.2) body.max_tokens = undefined;  // runs to the context limit unless stopped
  if (stream && rand() < 0.5) body.stream_options = { include_usage: true };
  const disconnectAfterMs = rand() < 0.3 ? Math.floor(rand() * 300) : -1;
  return { path: chat ? "/v1/chat/completions" : "/v1/completions", body, stream, disconnectAfterMs, label: `#${i}` };
}

async function metrics() {
  const r = await new Promise((resolve) => {
    http.get({ host: url.hostname, port: url.port, path: "/metrics" }, (res) => {
      let t = ""; res.on("data", (c) => (t += c)); res.on("end", () => resolve(t));
    }).on("error", () => resolve(""));
  });
  const value = (name) => {
    const m = r.match(new RegExp("^" + name + "\\{[^}]*\\} ([0-9.eE+-]+)$", "m"));
    return m ? Number(m[1]) : NaN;
  };
  return { running: value("kimi:num_requests_running"), waiting: value("kimi:num_requests_waiting"),
           kv: value("kimi:kv_cache_usage_perc") };
}

const counts = { complete: 0, error: 0, "hung-up": 0, bad: 0 };
let n = 0;
for (let w = 0; w < waves; ++w) {
  const reqs = Array.from({ length: perWave }, () => randomRequest(n++));
  const results = await Promise.all(reqs.map((q) => request(q.path, q.body, q)));
  results.forEach((r, i) => counts[judge(reqs[i].label, r, reqs[i].stream)]++);
}
console.log(`waves: ${JSON.stringify(counts)}`);
if (counts.complete === 0) fail("no request completed");

// Idle: the hung-up requests were aborted, nothing runs or waits, no block is held.
let m = await metrics();
for (let i = 0; i < 100 && !(m.running === 0 && m.waiting === 0 && m.kv === 0); ++i) {
  await new Promise((r) => setTimeout(r, 100));
  m = await metrics();
}
console.log(`after the waves: ${JSON.stringify(m)}`);
if (!(m.running === 0 && m.waiting === 0)) fail(`requests still in flight: ${JSON.stringify(m)}`);
if (m.kv !== 0) fail(`KV blocks still held: ${JSON.stringify(m)}`);

// The last wave, with SIGTERM in the middle. A request sent during the drain must get 503; the
// port may only be closed to it once the drain is over (every in-flight request answered).
const stamp = (p) => p.then((r) => ({ ...r, at: Date.now() }));
const last = Array.from({ length: perWave }, (_, i) => ({
  path: "/v1/completions", stream: i % 2 === 0, label: `last#${i}`,
  body: { model: "soak", prompt: "drain " + i, max_tokens: 96, stream: i % 2 === 0, ignore_eos: true, temperature: 0 },
}));
const inflight = last.map((q) => stamp(request(q.path, q.body)));
await new Promise((r) => setTimeout(r, 150));
process.kill(serverPid, "SIGTERM");
await new Promise((r) => setTimeout(r, 10));
const late = await stamp(request("/v1/completions", { model: "soak", prompt: "late", max_tokens: 4 }));
const lastResults = await Promise.all(inflight);
const drainEnd = Math.max(...lastResults.map((r) => r.at));
if (late.kind === "response") {
  if (late.status !== 503) fail(`a request during the drain got ${late.status}, not 503: ${late.text.slice(0, 200)}`);
  else judge("late", late, false);
} else if (late.at < drainEnd) {
  fail(`a request during the drain lost its connection while requests were still in flight: ${late.kind} ${late.error || ""}`);
}
lastResults.forEach((r, i) => {
  if (judge(last[i].label, r, last[i].stream) !== "complete") fail(`${last[i].label} did not complete during the drain`);
});
console.log(`drain: ${lastResults.length} in-flight requests completed, late request: ${late.status || late.error}`);
if (failures.length) { console.error(`${failures.length} failures`); process.exit(1); }
console.log("soak: passed");
